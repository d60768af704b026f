package api

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/api/serviceerror"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
)

// Error is an HTTP error answer. toError is the only place that knows which
// status and code a domain error deserves.
type Error struct {
	Status     int
	Code       string
	Message    string
	OrderID    string        // set for ALREADY_PURCHASED
	RetryAfter time.Duration // set for RATE_LIMITED
	body       []byte        // the pre-encoded answer of the static errors below
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func newError(status int, code, msg string) *Error {
	e := &Error{Status: status, Code: code, Message: msg}
	e.body = e.encode()
	return e
}

// The API's error answers; domain errors of other packages become one of
// them in toError.
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
	// ErrOutcomeUnknown: Redis failed during the reservation and again for
	// the confirm window.
	ErrOutcomeUnknown = newError(http.StatusServiceUnavailable, "UNAVAILABLE",
		"temporarily unavailable; whether a unit was reserved for you is not known yet; try again")
	// ErrActionNotRecorded: a pay or cancel could not be recorded within
	// order.DoorLimit of its arrival (payment.ErrNotRecorded).
	ErrActionNotRecorded = newError(http.StatusServiceUnavailable, "UNAVAILABLE",
		"temporarily unavailable; whether your pay or cancel was recorded is not known yet; GET the order, or try again")
	ErrNoRoute          = newError(http.StatusNotFound, "NOT_FOUND", "no such route")
	ErrMethodNotAllowed = newError(http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "method not allowed on this route")
	ErrPayloadTooLarge  = newError(http.StatusRequestEntityTooLarge, "PAYLOAD_TOO_LARGE", "request body too large")
	ErrInternal         = newError(http.StatusInternalServerError, "INTERNAL", "internal error")
	ErrOrderNotPayable  = newError(http.StatusConflict, order.ReasonNotPayable, "the order is not pending payment")
	// ErrSaleAlreadyEnded answers an admin's end or add on an ended sale.
	ErrSaleAlreadyEnded = newError(http.StatusConflict, "SALE_ENDED", "the sale has already ended")
	// ErrKeyReused answers an add whose Idempotency-Key an add of another
	// number of units already used.
	ErrKeyReused = newError(http.StatusConflict, "IDEMPOTENCY_KEY_REUSED",
		"this Idempotency-Key was already used for an add of another number of units; use a new key for a new add")
)

// with is a copy of e with another message.
func (e *Error) with(msg string) *Error {
	c := *e
	c.Message, c.body = msg, nil
	return &c
}

// badRequest names what is wrong with the request.
func badRequest(msg string) *Error { return ErrBadRequest.with(msg) }

// tooManyStreams refuses an event stream past the open-stream caps.
var tooManyStreams = rateLimited(5 * time.Second).with("too many open event streams; close one or poll GET /api/v1/orders/:orderId")

func alreadyPurchased(orderID string) *Error {
	return &Error{Status: http.StatusConflict, Code: "ALREADY_PURCHASED",
		Message: "you already have an order for this item", OrderID: orderID}
}

func rateLimited(retry time.Duration) *Error {
	e := *ErrRateLimited
	e.RetryAfter = retry
	return &e
}

type errorObject struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	OrderID string `json:"order_id,omitempty"`
}

func (e *Error) encode() []byte {
	b, _ := json.Marshal(map[string]errorObject{"error": {Code: e.Code, Message: e.Message, OrderID: e.OrderID}})
	return b
}

// toError maps any error to its answer.
func toError(err error) *Error {
	if e, ok := err.(*Error); ok { // the common case (SOLD_OUT, RATE_LIMITED, ...): no reflection
		return e
	}
	var e *Error
	var already *stock.AlreadyReservedError
	var tooLarge *http.MaxBytesError
	var unavailable *serviceerror.Unavailable
	switch {
	case errors.As(err, &e):
		return e
	case errors.As(err, &already):
		return alreadyPurchased(already.OrderID)
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
		return badRequest(fmt.Sprintf("add: stock_total would exceed %d", store.MaxStockTotal))
	case errors.Is(err, order.ErrNotPayable):
		return ErrOrderNotPayable
	case errors.Is(err, payment.ErrNotRecorded):
		return ErrActionNotRecorded
	case errors.As(err, &tooLarge):
		return ErrPayloadTooLarge
	case errors.As(err, &unavailable), errors.Is(err, context.DeadlineExceeded), isConnError(err):
		return ErrUnavailable
	}
	return ErrInternal
}

// isConnError reports a failure to reach a backing service (Redis, MySQL),
// or one that is back in a moment: a Redis loading its data after a restart,
// failing over or resharding, a MySQL connection broken mid-query.
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

// fail writes err's answer and stops the handler chain.
func (s *Server) fail(c *gin.Context, err error) {
	e := toError(err)
	if e.Status >= 500 {
		s.log.Warn("request failed", "route", c.FullPath(), "status", e.Status, "err", err)
	}
	s.metrics.rejected(e.Code)
	writeError(c, e)
}

func writeError(c *gin.Context, e *Error) {
	if e.RetryAfter > 0 {
		c.Header("Retry-After", strconv.Itoa(max(int(math.Ceil(e.RetryAfter.Seconds())), 1)))
	}
	body := e.body
	if body == nil {
		body = e.encode()
	}
	c.Abort()
	writeJSON(c, e.Status, body)
}

// jsonContentType is shared by every answer's header map; it is only read.
var jsonContentType = []string{"application/json; charset=utf-8"}

// writeJSON writes a pre-encoded JSON body (what c.Data does, without
// allocating the Content-Type value each time).
func writeJSON(c *gin.Context, status int, body []byte) {
	c.Writer.Header()["Content-Type"] = jsonContentType
	c.Status(status)
	_, _ = c.Writer.Write(body)
}

// recovery turns a panic into 500 INTERNAL, the stack trace to the log only.
func (s *Server) recovery() gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				s.log.Error("panic in handler", "route", c.FullPath(), "panic", r, "stack", string(debug.Stack()))
				s.metrics.rejected(ErrInternal.Code)
				writeError(c, ErrInternal)
			}
		}()
		c.Next()
	}
}
