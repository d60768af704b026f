package queue

import (
	"errors"
	"strings"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/order"
)

func signer(current, previous string) *Signer {
	return NewSigner(config.RocketMQ{OrderSigningKey: config.Secret(current), OrderSigningKeyPrevious: config.Secret(previous)})
}

func message(body []byte, sig string) *primitive.Message {
	m := primitive.NewMessage("t", body)
	if sig != "" {
		m.WithProperty(SignatureProperty, sig)
	}
	return m
}

// A body signed with the key verifies; an unsigned message, a body signed
// with another key, an altered body, an altered or garbled signature do not.
func TestSignVerify(t *testing.T) {
	key, other := strings.Repeat("k", 32), strings.Repeat("o", 32)
	s := signer(key, "")
	body := order.Message{OrderID: "o1", ItemID: 7, UserID: 1001}.Encode()
	sig := s.Sign(body)
	if err := s.Verify(message(body, sig)); err != nil {
		t.Fatalf("genuine message refused: %v", err)
	}
	m := message(body, "")
	s.SignMessage(m)
	if err := s.Verify(m); err != nil {
		t.Fatalf("SignMessage: refused: %v", err)
	}
	altered := order.Message{OrderID: "o1", ItemID: 7, UserID: 1002}.Encode()
	flipped := []byte(sig)
	flipped[3] ^= 1
	for name, tc := range map[string]struct {
		m    *primitive.Message
		want error
	}{
		"unsigned":          {message(body, ""), ErrUnsigned},
		"another key":       {message(body, signer(other, "").Sign(body)), ErrBadSignature},
		"altered body":      {message(altered, sig), ErrBadSignature},
		"altered signature": {message(body, string(flipped)), ErrBadSignature},
		"not base64":        {message(body, "***"), ErrBadSignature},
		"truncated":         {message(body, sig[:20]), ErrBadSignature},
	} {
		if err := s.Verify(tc.m); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}

// A rotation: the new key signs, a message signed with the previous key is
// still accepted while it is configured, and refused once it is dropped; a
// worker that knows the new key only as its previous one (the rotation's
// first step) already accepts what the new key signs.
func TestSignKeyRotation(t *testing.T) {
	oldKey, newKey := strings.Repeat("a", 32), strings.Repeat("b", 32)
	body := order.Message{OrderID: "o1", ItemID: 7, UserID: 1001}.Encode()
	byOld, byNew := signer(oldKey, "").Sign(body), signer(newKey, "").Sign(body)
	if byOld == byNew {
		t.Fatal("two keys gave one signature")
	}
	step1, step2, step3 := signer(oldKey, newKey), signer(newKey, oldKey), signer(newKey, "")
	if got := step1.Sign(body); got != byOld {
		t.Fatal("step 1 must still sign with the old key")
	}
	if got := step2.Sign(body); got != byNew {
		t.Fatal("step 2 must sign with the new key")
	}
	for name, tc := range map[string]struct {
		s   *Signer
		sig string
		ok  bool
	}{
		"step 1, old": {step1, byOld, true}, "step 1, new": {step1, byNew, true},
		"step 2, old": {step2, byOld, true}, "step 2, new": {step2, byNew, true},
		"step 3, old": {step3, byOld, false}, "step 3, new": {step3, byNew, true},
	} {
		if err := tc.s.Verify(message(body, tc.sig)); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want accepted %v", name, err, tc.ok)
		}
	}
}
