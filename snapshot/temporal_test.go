package snapshot_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"

	"github.com/seckill/seckill/snapshot"
)

// visibility stands in for Temporal's visibility API: it pages n sagas
// (the token is the offset of the next page) and fails the calls fail says.
type visibility struct {
	workflowservice.WorkflowServiceClient // nil: only ListWorkflowExecutions is called
	n                                     int
	// fail answers the try-th call (from 1) for a page's token: an error,
	// "hang" to block until the call's deadline, or nil.
	fail func(token string, try int) error

	mu    sync.Mutex
	calls []call
}

type call struct {
	token    string
	pageSize int32
	timeout  time.Duration // the call's deadline, from when it came in
}

var errHang = errors.New("hang until the deadline")

func (v *visibility) WorkflowService() workflowservice.WorkflowServiceClient { return v }

func (v *visibility) ListWorkflowExecutions(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest, _ ...grpc.CallOption) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	tok := string(req.GetNextPageToken())
	dl, _ := ctx.Deadline()
	v.mu.Lock()
	v.calls = append(v.calls, call{token: tok, pageSize: req.GetPageSize(), timeout: time.Until(dl)})
	try := 0
	for _, c := range v.calls {
		if c.token == tok {
			try++
		}
	}
	v.mu.Unlock()
	if err := v.fail(tok, try); err != nil {
		if err == errHang {
			<-ctx.Done()
			return nil, serviceerror.NewDeadlineExceeded(ctx.Err().Error())
		}
		return nil, err
	}
	from, _ := strconv.Atoi(tok)
	to := min(from+int(req.GetPageSize()), v.n)
	resp := &workflowservice.ListWorkflowExecutionsResponse{}
	for i := from; i < to; i++ {
		resp.Executions = append(resp.Executions, &workflowpb.WorkflowExecutionInfo{
			Execution: &commonpb.WorkflowExecution{WorkflowId: fmt.Sprintf("order-%05d", i)},
			Status:    enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
		})
	}
	if to < v.n {
		resp.NextPageToken = []byte(strconv.Itoa(to))
	}
	return resp, nil
}

func (v *visibility) tokens() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for _, c := range v.calls {
		out = append(out, c.token)
	}
	return out
}

// The error a busy server's reset stream arrives as (RST_STREAM CANCEL).
var errReset = serviceerror.NewCanceled("stream terminated by RST_STREAM with error code: CANCEL")

// A page call that fails for a while (a reset stream twice, then one that
// hangs past its own timeout) is tried again from its own page token, and
// the listing holds every saga once.
func TestTemporalListerRetriesAFailedPageFromItsToken(t *testing.T) {
	v := &visibility{n: 2500, fail: func(tok string, try int) error {
		switch {
		case tok == "1000" && try <= 2:
			return errReset
		case tok == "2000" && try == 1:
			return errHang
		}
		return nil
	}}
	l := snapshot.TemporalLister{Client: v, Namespace: "default", PageTimeout: 200 * time.Millisecond, Backoff: time.Millisecond}
	wfs, err := l.ListOrderWorkflows(context.Background(), 42)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, w := range wfs {
		if seen[w.OrderID] || !w.Running() {
			t.Fatalf("saga %+v listed twice or not running", w)
		}
		seen[w.OrderID] = true
	}
	if len(seen) != 2500 || !seen["00000"] || !seen["02499"] {
		t.Fatalf("listed %d distinct sagas, want 2500", len(seen))
	}
	if got, want := strings.Join(v.tokens(), ","), ",1000,1000,1000,2000,2000"; got != want {
		t.Fatalf("page tokens called %q, want %q (a retry resumes at its page)", got, want)
	}
	for _, c := range v.calls {
		if c.pageSize != snapshot.DefaultPageSize {
			t.Fatalf("page size %d, want the default %d", c.pageSize, snapshot.DefaultPageSize)
		}
		if c.timeout <= 0 || c.timeout > 200*time.Millisecond {
			t.Fatalf("page call with deadline in %v, want its own timeout of at most 200ms", c.timeout)
		}
	}
}

// A page that keeps failing ends the listing after the bounded tries, and
// the error names the item, the page and how many sagas came before it.
func TestTemporalListerNamesThePageThatKeepsFailing(t *testing.T) {
	v := &visibility{n: 2500, fail: func(tok string, _ int) error {
		if tok == "2000" {
			return errReset
		}
		return nil
	}}
	l := snapshot.TemporalLister{Client: v, Namespace: "default", Backoff: time.Millisecond}
	wfs, err := l.ListOrderWorkflows(context.Background(), 42)
	if err == nil {
		t.Fatalf("listed %d sagas, want an error", len(wfs))
	}
	want := "temporal visibility: list workflows of item 42, page 3 (after 2000 sagas), 4 attempt(s): "
	if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "RST_STREAM") {
		t.Fatalf("error %q, want it to start %q and keep the cause", err, want)
	}
	var canceled *serviceerror.Canceled
	if !errors.As(err, &canceled) {
		t.Fatalf("error %v does not wrap the server's", err)
	}
	if got, want := strings.Join(v.tokens(), ","), ",1000,2000,2000,2000,2000"; got != want {
		t.Fatalf("page tokens called %q, want %q", got, want)
	}
}

// A query the server refuses (an unregistered search attribute) is not
// tried again.
func TestTemporalListerDoesNotRetryARefusedQuery(t *testing.T) {
	v := &visibility{n: 10, fail: func(string, int) error {
		return serviceerror.NewInvalidArgument("invalid query: unknown search attribute SeckillItemId")
	}}
	l := snapshot.TemporalLister{Client: v, Backoff: time.Millisecond}
	if _, err := l.ListOrderWorkflows(context.Background(), 7); err == nil ||
		!strings.Contains(err.Error(), "item 7, page 1 (after 0 sagas), 1 attempt(s)") {
		t.Fatalf("error %v, want the refused first page named", err)
	}
	if n := len(v.tokens()); n != 1 {
		t.Fatalf("%d calls, want 1", n)
	}
}

// The caller's deadline bounds the whole listing, retries included.
func TestTemporalListerStopsWhenTheCallerGivesUp(t *testing.T) {
	v := &visibility{n: 10, fail: func(string, int) error { return errReset }}
	l := snapshot.TemporalLister{Client: v, Attempts: 100, Backoff: time.Hour}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := l.ListOrderWorkflows(ctx, 7); err == nil {
		t.Fatal("listed with every call failing")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("returned after %v, want soon after the caller's 50ms deadline", d)
	}
}
