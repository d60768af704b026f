package events_test

import (
	"crypto/ed25519"
	"errors"
	"testing"

	"github.com/seckill/seckill/events"
)

// An event verifies with the key that signed it, during a rotation with
// either published key; a changed body, an unknown key, a missing or
// malformed signature are refused.
func TestEventSignatures(t *testing.T) {
	old, _ := events.NewSigner([]byte("0123456789abcdef0123456789abcdef"))
	cur, err := events.NewSigner([]byte("fedcba9876543210fedcba9876543210"))
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"event_id":"O1:PAID","order_id":"O1","status":"PAID"}`)
	published := []ed25519.PublicKey{cur.Public(), old.Public()}
	for name, s := range map[string]*events.Signer{"current": cur, "previous": old} {
		if err := events.Verify(published, body, s.Sign(body)); err != nil {
			t.Errorf("%s key: %v", name, err)
		}
	}
	props := cur.Sign(body)
	forged := []byte(`{"event_id":"O1:PAID","order_id":"O2","status":"PAID"}`)
	cases := map[string]struct {
		keys  []ed25519.PublicKey
		body  []byte
		props map[string]string
		want  error
	}{
		"another body":        {published, forged, props, events.ErrForged},
		"a key not published": {[]ed25519.PublicKey{old.Public()}, body, props, events.ErrUnknownKey},
		"unsigned":            {published, body, map[string]string{}, events.ErrUnsigned},
		"not base64":          {published, body, map[string]string{events.SignatureProperty: "%%", events.KeyIDProperty: props[events.KeyIDProperty]}, events.ErrForged},
	}
	for name, c := range cases {
		if err := events.Verify(c.keys, c.body, c.props); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	if _, err := events.NewSigner([]byte("short")); err == nil {
		t.Error("a seed of 5 bytes was taken")
	}
}
