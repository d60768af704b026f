// Package apierr is the API's error answers, shared by api and its jobs: the
// Error type, the mapping of any error to its answer (To), writing it; and
// small helpers of the jobs (request readers, Retry, Reused).
package apierr

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/api/serviceerror"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
)

// Error is an HTTP error answer.
type Error struct {
	Status     int
	Code       string
	Message    string
	OrderID    string        // set for ALREADY_PURCHASED
	RetryAfter time.Duration // set for RATE_LIMITED
	body       []byte        // pre-encoded answer of the static errors
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func newError(status int, code, msg string) *Error {
	e := &Error{Status: status, Code: code, Message: msg}
	e.body = e.encode()
	return e
}

// The API's error answers.
var (
	itemNotFound      = newError(http.StatusNotFound, "ITEM_NOT_FOUND", "no such item")
	orderNotFound     = newError(http.StatusNotFound, "ORDER_NOT_FOUND", "no such order")
	ErrBadRequest     = newError(http.StatusBadRequest, "BAD_REQUEST", "bad request")
	ErrUnauthorized   = newError(http.StatusUnauthorized, "UNAUTHORIZED", "a valid bearer token is required")
	ErrForbidden      = newError(http.StatusForbidden, "FORBIDDEN", "this route needs another role")
	ErrSaleNotStarted = newError(http.StatusForbidden, "SALE_NOT_STARTED", "the sale has not started yet")
	ErrSaleEnded      = newError(http.StatusForbidden, "SALE_ENDED", "the sale has ended")
	ErrSoldOut        = newError(http.StatusGone, "SOLD_OUT", "sold out")
	ErrRateLimited    = newError(http.StatusTooManyRequests, "RATE_LIMITED", "too many requests")
	ErrUnavailable    = newError(http.StatusServiceUnavailable, "UNAVAILABLE", "temporarily unavailable, nothing was reserved; try again")
	// ErrOutcomeUnknown: Redis failed during a reservation and its confirm.
	ErrOutcomeUnknown = newError(http.StatusServiceUnavailable, "UNAVAILABLE",
		"temporarily unavailable; whether a unit was reserved for you is not known yet; try again")
	// ErrActionNotRecorded is payment.ErrNotRecorded.
	ErrActionNotRecorded = newError(http.StatusServiceUnavailable, "UNAVAILABLE",
		"temporarily unavailable; whether your pay or cancel was recorded is not known yet; GET the order, or try again")
	ErrNoRoute             = newError(http.StatusNotFound, "NOT_FOUND", "no such route")
	ErrMethodNotAllowed    = newError(http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "method not allowed on this route")
	ErrPayloadTooLarge     = newError(http.StatusRequestEntityTooLarge, "PAYLOAD_TOO_LARGE", "request body too large")
	ErrInternal            = newError(http.StatusInternalServerError, "INTERNAL", "internal error")
	ErrOrderNotPayable     = newError(http.StatusConflict, order.ReasonNotPayable, "the order is not pending payment")
	ErrNotRefundable       = newError(http.StatusConflict, "NOT_REFUNDABLE", "only a PAID order paid through a payment provider can be refunded")
	ErrSaleAlreadyEnded    = newError(http.StatusConflict, "SALE_ENDED", "the sale has already ended")
	ErrBadNotification     = newError(http.StatusBadRequest, "BAD_NOTIFICATION", "the notification's signature or timestamp does not verify") // nothing written
	ErrProviderUnavailable = newError(http.StatusServiceUnavailable, "UNAVAILABLE", "the payment provider did not answer; try again")
	ErrKeyReused           = newError(http.StatusConflict, "IDEMPOTENCY_KEY_REUSED",
		"this Idempotency-Key was already used for an add of another number of units; use a new key for a new add")
)

// With is a copy of e with another message.
func (e *Error) With(msg string) *Error {
	c := *e
	c.Message, c.body = msg, nil
	return &c
}

// BadRequest names what is wrong with the request.
func BadRequest(msg string) *Error { return ErrBadRequest.With(msg) }

// AlreadyPurchased is 409 ALREADY_PURCHASED with the buyer's order.
func AlreadyPurchased(orderID string) *Error {
	return &Error{Status: http.StatusConflict, Code: "ALREADY_PURCHASED",
		Message: "you already have an order for this item", OrderID: orderID}
}

// RateLimited is 429 RATE_LIMITED with its Retry-After.
func RateLimited(retry time.Duration) *Error {
	e := *ErrRateLimited
	e.RetryAfter = retry
	return &e
}

// Object is the "error" member of every error body.
type Object struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	OrderID string `json:"order_id,omitempty"`
}

func (e *Error) encode() []byte {
	b, _ := json.Marshal(map[string]Object{"error": {Code: e.Code, Message: e.Message, OrderID: e.OrderID}})
	return b
}

// To maps any error to its answer.
func To(err error) *Error {
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	if already, ok := errors.AsType[*stock.AlreadyReservedError](err); ok {
		return AlreadyPurchased(already.OrderID)
	}
	var tooLarge *http.MaxBytesError
	var unavailable *serviceerror.Unavailable
	switch {
	case errors.Is(err, stock.ErrSoldOut):
		return ErrSoldOut
	case errors.Is(err, stock.ErrNotLoaded):
		return ErrUnavailable // stock not in Redis: nothing can be reserved now
	case errors.Is(err, auth.ErrInvalidToken):
		return ErrUnauthorized
	case errors.Is(err, order.ErrNotFound):
		return orderNotFound
	case errors.Is(err, order.ErrItemNotFound):
		return itemNotFound
	case errors.Is(err, store.ErrSaleEnded):
		return ErrSaleAlreadyEnded
	case errors.Is(err, store.ErrAddKeyReused):
		return ErrKeyReused
	case errors.Is(err, store.ErrStockTooLarge):
		return BadRequest(fmt.Sprintf("add: stock_total would exceed %d", store.MaxStockTotal))
	case errors.Is(err, order.ErrNotPayable):
		return ErrOrderNotPayable
	case errors.Is(err, order.ErrNotRefundable):
		return ErrNotRefundable.With(err.Error())
	case errors.Is(err, payment.ErrNotRecorded):
		return ErrActionNotRecorded
	case errors.Is(err, provider.ErrBadSignature), errors.Is(err, provider.ErrStale), errors.Is(err, provider.ErrMalformed):
		return ErrBadNotification
	case errors.Is(err, provider.ErrUnavailable), errors.Is(err, provider.ErrRateLimited):
		return ErrProviderUnavailable
	case errors.As(err, &tooLarge):
		return ErrPayloadTooLarge
	case errors.As(err, &unavailable), errors.Is(err, context.DeadlineExceeded), isConnError(err):
		return ErrUnavailable
	}
	return ErrInternal
}

// isConnError reports a failure to reach Redis or MySQL, or one that passes
// soon (Redis loading, failing over or resharding; a broken connection).
func isConnError(err error) bool {
	var ne net.Error // *net.OpError among others
	if errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed) ||
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) {
		return true
	}
	for _, p := range []string{"LOADING", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "READONLY"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// Write writes e's answer and stops the handler chain.
func Write(c *gin.Context, e *Error) {
	if e.RetryAfter > 0 {
		c.Header("Retry-After", strconv.Itoa(max(int(math.Ceil(e.RetryAfter.Seconds())), 1)))
	}
	body := e.body
	if body == nil {
		body = e.encode()
	}
	c.Abort()
	WriteJSON(c, e.Status, body)
}

// jsonContentType is shared by every answer's header map: never written.
var jsonContentType = []string{"application/json; charset=utf-8"}

// WriteJSON is c.Data for JSON without allocating the Content-Type value.
func WriteJSON(c *gin.Context, status int, body []byte) {
	c.Writer.Header()["Content-Type"] = jsonContentType
	c.Status(status)
	_, _ = c.Writer.Write(body)
}

// Handle adapts a handler that returns its error, which fail answers.
func Handle(fail func(*gin.Context, error), h func(c *gin.Context) error) gin.HandlerFunc {
	return func(c *gin.Context) {
		if err := h(c); err != nil {
			fail(c, err)
		}
	}
}

// ReadJSON decodes the body into dst; shape is the 400's message.
func ReadJSON(c *gin.Context, dst any, shape string) error {
	body, err := io.ReadAll(c.Request.Body)
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return err
	case err != nil:
		return BadRequest("could not read the body")
	case json.Unmarshal(body, dst) != nil:
		return BadRequest(shape)
	}
	return nil
}

// ParseID parses a positive decimal int64 id (digits only).
func ParseID(s string) (int64, bool) {
	if s == "" || len(s) > 19 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0
}

// Retry calls try until it succeeds or ctx ends (returning try's last
// error), backing off from 50 ms to 1 s.
func Retry(ctx context.Context, try func(ctx context.Context) error) error {
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		err := try(ctx)
		if err == nil {
			return nil
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// Reused holds the last result of an evaluation, errors included, until it
// is ttl old; concurrent callers share one evaluation.
type Reused[T any] struct {
	mu  sync.Mutex
	at  time.Time
	val T
	err error
}

// Get returns the held result, evaluating it again when it is ttl old.
func (r *Reused[T]) Get(now func() time.Time, ttl time.Duration, eval func() (T, error)) (T, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at.IsZero() || now().Sub(r.at) >= ttl {
		r.val, r.err = eval()
		r.at = now()
	}
	return r.val, r.err
}
