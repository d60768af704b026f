package events

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/seckill/seckill/queue"
)

// An order event carries its Ed25519 signature in two message properties
// (docs/events.md, "Verifying an event"): the signature of the body, and the
// id of the key that made it. Only the publisher holds the private key; the
// shop verifies with the public keys the API publishes
// (GET /api/v1/events/keys), two of them during a rotation. Whoever can
// read or publish to the broker cannot forge one.
const (
	SignatureProperty = "seckill-event-signature" // base64 (standard, padded) of ed25519.Sign(key, body)
	KeyIDProperty     = "seckill-event-key"       // KeyID of the signing key's public key
)

// KeyID names a public key: the first 8 bytes of its SHA-256, in hex.
func KeyID(pub ed25519.PublicKey) string {
	h := sha256.Sum256(pub)
	return hex.EncodeToString(h[:8])
}

// Signer signs order events with the publisher's private key.
type Signer struct {
	priv ed25519.PrivateKey
	kid  string
}

// NewSigner returns the signer of an Ed25519 seed (32 bytes).
func NewSigner(seed []byte) (*Signer, error) {
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("events signing key: %d bytes, want an Ed25519 seed of %d", len(seed), ed25519.SeedSize)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	return &Signer{priv: priv, kid: KeyID(priv.Public().(ed25519.PublicKey))}, nil
}

// Public is the signer's public key.
func (s *Signer) Public() ed25519.PublicKey { return s.priv.Public().(ed25519.PublicKey) }

// Sign returns the properties that sign body.
func (s *Signer) Sign(body []byte) map[string]string {
	return map[string]string{SignatureProperty: base64.StdEncoding.EncodeToString(ed25519.Sign(s.priv, body)), KeyIDProperty: s.kid}
}

// Signed is s with every event signed by sig.
func Signed(s Sender, sig *Signer) Sender { return signed{s, sig} }

type signed struct {
	Sender
	sig *Signer
}

func (s signed) SendEvent(ctx context.Context, topic string, e queue.Encoded) error {
	e.Props = s.sig.Sign(e.Body)
	return s.Sender.SendEvent(ctx, topic, e)
}

// Why an event is refused (Verify).
var (
	ErrUnsigned   = errors.New("order event carries no signature")
	ErrUnknownKey = errors.New("order event signed with a key not published")
	ErrForged     = errors.New("order event signature does not verify")
)

// Verify is the shop's recipe: the key named by the message, among the
// published ones, must verify the signature of the body.
func Verify(keys []ed25519.PublicKey, body []byte, props map[string]string) error {
	sig, kid := props[SignatureProperty], props[KeyIDProperty]
	if sig == "" || kid == "" {
		return ErrUnsigned
	}
	raw, err := base64.StdEncoding.DecodeString(sig)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrForged, err)
	}
	for _, k := range keys {
		if KeyID(k) == kid {
			if !ed25519.Verify(k, body, raw) {
				return ErrForged
			}
			return nil
		}
	}
	return ErrUnknownKey
}
