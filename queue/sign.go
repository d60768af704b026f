package queue

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/seckill/seckill/config"
)

// SignatureProperty carries the HMAC-SHA256 of the body (unpadded
// base64url); the broker keeps it on the retry and dead-letter topics.
const SignatureProperty = "seckill-signature"

// Why a message is refused (Signer.Verify).
var (
	ErrUnsigned     = errors.New("order message carries no signature")
	ErrBadSignature = errors.New("order message signature matches no order signing key")
)

// Signer signs order messages with the current key and accepts the current
// or the previous one; a replay is harmless (one saga per order id).
type Signer struct {
	keys [][]byte // keys[0] signs; each verifies
}

// NewSigner returns the signer of cfg's order signing keys.
func NewSigner(cfg config.RocketMQ) *Signer {
	s := &Signer{keys: [][]byte{[]byte(cfg.OrderSigningKey.Value())}}
	if prev := cfg.OrderSigningKeyPrevious.Value(); prev != "" {
		s.keys = append(s.keys, []byte(prev))
	}
	return s
}

// Sign returns the signature of body with the current key.
func (s *Signer) Sign(body []byte) string {
	return base64.RawURLEncoding.EncodeToString(mac(s.keys[0], body))
}

// SignMessage sets m's signature property from its body.
func (s *Signer) SignMessage(m *primitive.Message) {
	m.WithProperty(SignatureProperty, s.Sign(m.Body))
}

// Verify returns nil, ErrUnsigned or ErrBadSignature.
func (s *Signer) Verify(m *primitive.Message) error {
	sig := m.GetProperty(SignatureProperty)
	if sig == "" {
		return ErrUnsigned
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return ErrBadSignature
	}
	for _, k := range s.keys {
		if hmac.Equal(got, mac(k, m.Body)) {
			return nil
		}
	}
	return ErrBadSignature
}

func mac(key, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(body)
	return h.Sum(nil)
}
