package standin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/seckill/seckill/payment/provider"
)

// emitLocked records an event of type typ about object and sends it to
// the webhook URL when its type is enabled, as the knobs say: dropped,
// held back, sent twice. Each copy is signed when it is sent.
func (s *Server) emitLocked(typ string, object map[string]any) {
	id := s.id("evt")
	body, err := json.Marshal(map[string]any{
		"id": id, "object": "event", "api_version": stripe.APIVersion, "created": s.o.Now().Unix(), "livemode": false,
		"pending_webhooks": 1, "request": map[string]any{"id": nil, "idempotency_key": nil}, "type": typ,
		"data": map[string]any{"object": object},
	})
	if err != nil {
		s.o.Logger.Error("standin: encode event", "event", id, "type", typ, "err", err)
		return
	}
	s.events[id] = body
	if s.o.WebhookURL == "" || !s.types[typ] {
		return
	}
	k := s.knobs
	if s.rnd.Float64() < k.Drop {
		s.o.Logger.Info("standin: event not sent (the Drop knob)", "event", id, "type", typ)
		return
	}
	wait := k.Delay
	if s.rnd.Float64() < k.Reorder {
		wait += k.ReorderBy
	}
	copies := 1
	if s.rnd.Float64() < k.Duplicate {
		copies = 2
	}
	for range copies {
		s.sends.Add(1)
		go s.send(id, typ, body, wait)
	}
}

// maxResendWait caps the wait between two sends of an event.
const maxResendWait = time.Minute

// send POSTs one copy after wait, resending with backoff until a 2xx, the
// resends run out or Close.
func (s *Server) send(id, typ string, body []byte, wait time.Duration) {
	defer s.sends.Done()
	backoff := s.o.ResendAfter
	for n := 0; ; n++ {
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-s.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		err := s.post(body)
		if err == nil {
			return
		}
		if n >= s.o.Resends || s.ctx.Err() != nil {
			s.o.Logger.Warn("standin: event given up", "event", id, "type", typ, "sends", n+1, "err", err)
			return
		}
		s.o.Logger.Info("standin: event not taken, resending", "event", id, "type", typ, "in", backoff, "err", err)
		wait, backoff = backoff, min(backoff*2, maxResendWait)
	}
}

// post sends body signed as Stripe signs: Stripe-Signature t=…,v1=…, the
// HMAC-SHA256 of "<t>.<body>" with the endpoint's secret.
func (s *Server) post(body []byte) error {
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, s.o.WebhookURL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks; the seckill stand-in)")
	req.Header.Set(provider.SignatureHeader, provider.Sign(body, s.o.WebhookSecret, s.o.Now()))
	resp, err := s.o.Client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // the connection is reused
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}
