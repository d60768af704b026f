package bench

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/payment/provider/testpay"
)

// A round of the stampede waits for every payment's notification to be
// answered (duplicates and held-back copies included) and counts each event
// once: every event paid once, its copies answered as repeats, none refused.
func TestNotificationRound(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev provider.StripeEvent
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &ev)
		mu.Lock()
		outcome := "paid"
		if seen[ev.ID] {
			outcome = "repeated"
		}
		seen[ev.ID] = true
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]string{"outcome": outcome})
	}))
	defer srv.Close()
	sent := &sentNotes{outcomes: map[string][]string{}, sem: make(chan struct{}, 8), all: NewRecorder(time.Now()),
		rec: NewRecorder(time.Now()), hop: http.DefaultTransport}
	tp := testpay.New(testpay.Options{Secret: "whsec_x", NotifyURL: srv.URL, Client: &http.Client{Transport: sent},
		Knobs: testpay.Knobs{Duplicate: 0.5, Reorder: 0.2, ReorderBy: 50 * time.Millisecond}, Seed: 7})
	defer tp.Close()
	ctx := context.Background()
	var ids []string
	for i := range 40 {
		p, err := tp.Create(ctx, provider.Request{OrderID: "o" + string(rune('A'+i)), Amount: 100, Currency: "EUR", PayBy: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.ID)
	}
	f := sent.round(ctx, tp, ids)
	sent.waitIdle(ctx)
	c := sent.counts()
	if f.perSec <= 0 || len(sent.outcomes) != 40 || c["paid"] != 40 || c["repeated"] == 0 || sent.refused() != 0 {
		t.Fatalf("round %+v, answers %v, %d events, %d refused", f, c, len(sent.outcomes), sent.refused())
	}
}
