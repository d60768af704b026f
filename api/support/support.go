// Package support is support staff's order desk (admin): find any order by
// its id or its buyer's, with its payments, refunds and saga, and refund a
// PAID order through the saga (workflows.PaymentRefund, Support).
package support

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/ledger"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/workflows"
)

// Rows are the orders, their payments and refunds (store.Store).
type Rows interface {
	FindOrder(ctx context.Context, orderID string) (store.Order, error)
	ListUserOrders(ctx context.Context, userID int64, before string, limit int) ([]store.Order, error)
	OrderPayments(ctx context.Context, orderID string) ([]store.Payment, error)
	OrderRefunds(ctx context.Context, orderID string) ([]store.Refund, error)
	// OweSupportRefund writes the refund row of a PAID order's payment (the
	// first ask's, with who asked and why), or returns the one written before.
	OweSupportRefund(ctx context.Context, orderID, reason, askedBy string) (store.Refund, store.Payment, error)
}

// Refunds starts support refunds (workflows.Client.StartSupportRefund).
type Refunds interface {
	StartSupportRefund(ctx context.Context, orderID, paymentID, reason string) error
}

var _ Rows = (*store.Store)(nil)

// Deps are what the desk is built from. Refunds nil: a refund answers 503.
type Deps struct {
	Rows     Rows
	Refunds  Refunds
	Temporal config.Temporal // UIURL "": no links
	Log      *slog.Logger
	// The API's check and error answer.
	Auth func(c *gin.Context, role auth.Role) (auth.Principal, error)
	Fail func(c *gin.Context, err error)
}

type desk struct{ d Deps }

// Register adds the desk's routes to r.
func Register(r gin.IRoutes, d Deps) {
	s := &desk{d: d}
	h := func(fn func(c *gin.Context) error) gin.HandlerFunc { return apierr.Handle(d.Fail, fn) }
	r.POST("/api/v1/orders/:orderId/refund", h(s.refund))
	r.GET("/api/v1/admin/orders", h(s.find))
}

// MaxReason is the longest refund reason (refunds.reason).
const MaxReason = 255

// Refund is the refund route's answer.
type Refund struct {
	OrderID     string       `json:"order_id"`
	Status      order.Status `json:"status"`
	WorkflowID  string       `json:"workflow_id"`
	WorkflowURL string       `json:"workflow_url,omitempty"`
	RefundID    string       `json:"refund_id,omitempty"`
	Reason      string       `json:"reason"`
}

// POST /api/v1/orders/:orderId/refund (admin), {"reason": "..."}: 202 while
// the refund runs (a repeat meanwhile answers the same workflow), 200 once
// the order is REFUNDED, with the first request's reason.
func (s *desk) refund(c *gin.Context) error {
	p, err := s.d.Auth(c, auth.RoleAdmin)
	if err != nil {
		return err
	}
	id := c.Param("orderId")
	if !order.ValidID(id) {
		return order.ErrNotFound
	}
	var req struct {
		Reason string `json:"reason"`
	}
	if err := apierr.ReadJSON(c, &req, `body: must be {"reason": "why the order is refunded"}`); err != nil {
		return err
	}
	reason := strings.TrimSpace(req.Reason)
	switch {
	case reason == "":
		return apierr.BadRequest("reason: required, not blank")
	case utf8.RuneCountInString(reason) > MaxReason:
		return apierr.BadRequest(fmt.Sprintf("reason: at most %d characters", MaxReason))
	}
	ctx := c.Request.Context()
	row, err := s.d.Rows.FindOrder(ctx, id)
	if err != nil {
		return err
	}
	if row.Status == order.StatusPaid && s.d.Refunds == nil {
		return apierr.ErrUnavailable
	}
	// The row is written before the workflow starts: the refund is owed
	// whatever happens to the start, and a second ask answers the first's.
	r, pay, err := s.d.Rows.OweSupportRefund(ctx, id, reason, store.AskedBySupport+strconv.FormatInt(p.UserID, 10))
	if err != nil {
		return err
	}
	wid := workflows.RefundWorkflowID(pay.ProviderPaymentID)
	ans := Refund{OrderID: id, Status: row.Status, WorkflowID: wid, WorkflowURL: s.link(wid), Reason: r.Reason, RefundID: r.ProviderRefundID}
	code := http.StatusOK
	if r.Status != store.RefundSucceeded {
		if err := s.d.Refunds.StartSupportRefund(ctx, id, pay.ProviderPaymentID, r.Reason); err != nil {
			return err
		}
		s.d.Log.Info("support refund asked", "order_id", id, "payment_id", pay.ProviderPaymentID, "admin", p.UserID, "reason", r.Reason)
		code = http.StatusAccepted
	}
	c.JSON(code, ans)
	return nil
}

// link is the Temporal UI's list of the workflow id's runs, or "".
func (s *desk) link(workflowID string) string {
	return s.d.Temporal.WorkflowsURL(fmt.Sprintf("WorkflowId=%q", workflowID))
}

// Found is one order as the find route shows it.
type Found struct {
	Order    order.View      `json:"order"`
	Payments []store.Payment `json:"payments"`
	Refunds  []store.Refund  `json:"refunds"`
	SagaID   string          `json:"saga_id"`
	SagaURL  string          `json:"saga_url,omitempty"`
	// Refundable: PAID through a provider payment (the refund route's 202).
	Refundable bool `json:"refundable"`
	// The support refund's workflow, once asked.
	RefundWorkflowID  string `json:"refund_workflow_id,omitempty"`
	RefundWorkflowURL string `json:"refund_workflow_url,omitempty"`
}

// findLimit is how many of a buyer's orders are shown, newest first.
const findLimit = 50

// GET /api/v1/admin/orders?order_id=… or ?buyer_id=… (admin): the orders,
// newest first (none: an empty list).
func (s *desk) find(c *gin.Context) error {
	if _, err := s.d.Auth(c, auth.RoleAdmin); err != nil {
		return err
	}
	oid, byOrder := c.GetQuery("order_id")
	bid, byBuyer := c.GetQuery("buyer_id")
	ctx := c.Request.Context()
	var rows []store.Order
	switch {
	case byOrder == byBuyer:
		return apierr.BadRequest("give order_id or buyer_id")
	case byOrder && order.ValidID(strings.TrimSpace(oid)):
		row, err := s.d.Rows.FindOrder(ctx, strings.TrimSpace(oid))
		if err != nil && !errors.Is(err, order.ErrNotFound) {
			return err
		}
		if err == nil {
			rows = append(rows, row)
		}
	case byBuyer:
		uid, ok := apierr.ParseID(strings.TrimSpace(bid))
		if !ok {
			return apierr.BadRequest("buyer_id: must be a positive integer")
		}
		var err error
		if rows, err = s.d.Rows.ListUserOrders(ctx, uid, "", findLimit); err != nil {
			return err
		}
	}
	out := make([]Found, 0, len(rows))
	for _, row := range rows {
		f, err := s.found(ctx, row)
		if err != nil {
			return err
		}
		out = append(out, f)
	}
	c.JSON(http.StatusOK, gin.H{"orders": out})
	return nil
}

func (s *desk) found(ctx context.Context, row store.Order) (Found, error) {
	f := Found{Order: row.View(), SagaID: workflows.WorkflowID(row.OrderID)}
	f.SagaURL = s.link(f.SagaID)
	var err error
	if f.Payments, err = s.d.Rows.OrderPayments(ctx, row.OrderID); err != nil {
		return f, err
	}
	if f.Refunds, err = s.d.Rows.OrderRefunds(ctx, row.OrderID); err != nil {
		return f, err
	}
	for _, p := range f.Payments {
		if !ledger.PaidWith(p.Facts(), row.Facts()) {
			continue
		}
		f.Refundable = row.Status == order.StatusPaid
		for _, r := range f.Refunds {
			if r.PaymentID == p.ID {
				f.RefundWorkflowID = workflows.RefundWorkflowID(p.ProviderPaymentID)
				f.RefundWorkflowURL = s.link(f.RefundWorkflowID)
			}
		}
	}
	for _, r := range f.Refunds {
		if f.Order.Status == order.StatusRefunded {
			f.Order = r.Show(f.Order)
		}
	}
	return f, nil
}
