package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The bench's control room polls the admin summary with an admin token and
// reports its polls, failures and latency.
func TestControlRoomPolls(t *testing.T) {
	var polls, bad atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/admin/summary" || !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
			bad.Add(1)
			http.NotFound(w, r)
			return
		}
		if polls.Add(1) == 2 {
			http.Error(w, `{"error":{"code":"UNAVAILABLE","message":"x"}}`, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(`{"sales":[]}`))
	}))
	defer srv.Close()
	room, err := OpenControlRoom(context.Background(), srv.URL+"/", []byte("secret"), 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); polls.Load() < 5; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the control room does not poll")
		}
	}
	rep := room.Close()
	if bad.Load() != 0 || rep.Errors != 1 || rep.Polls < 3 || rep.P99MS < rep.P50MS || rep.MaxMS < rep.P99MS || !strings.Contains(rep.LastErr, "503") {
		t.Fatalf("report %+v (bad requests %d)", rep, bad.Load())
	}
}
