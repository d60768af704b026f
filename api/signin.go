package api

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/auth"
)

// GET /api/v1/time (anyone; per-IP limit): the server's clock, which the
// pages count down against; dev says whether /api/v1/dev/token exists,
// checkout whether the order page pays through the provider's checkout.
func (s *Server) serverTime(c *gin.Context) error {
	if err := s.allowIP(c); err != nil {
		return err
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, gin.H{"now": s.now().UTC(), "dev": s.deps.DevSecret != nil, "checkout": s.deps.Payments.Cashier != nil})
	return nil
}

// Development sign-in: user ids up to maxDevUser, tokens valid devTokenTTL.
const (
	maxDevUser  = 1_000_000_000
	devTokenTTL = 12 * time.Hour
)

// POST /api/v1/dev/token (development only; per-IP limit), body
// {"user_id": N, "role": "buyer"|"admin"}: a token.
func (s *Server) devToken(c *gin.Context) error {
	if err := s.allowIP(c); err != nil {
		return err
	}
	var req struct {
		UserID int64     `json:"user_id"`
		Role   auth.Role `json:"role"`
	}
	if err := apierr.ReadJSON(c, &req, `body must be {"user_id": N, "role": "buyer" or "admin"}`); err != nil {
		return err
	}
	if req.Role == "" {
		req.Role = auth.RoleBuyer
	}
	switch {
	case req.UserID < 1 || req.UserID > maxDevUser:
		return apierr.BadRequest("user_id: must be between 1 and 1000000000")
	case req.Role != auth.RoleBuyer && req.Role != auth.RoleAdmin:
		return apierr.BadRequest(`role: must be "buyer" or "admin"`)
	}
	now := time.Now()
	tok, err := auth.Sign(s.deps.DevSecret, req.UserID, req.Role, devTokenTTL, now)
	if err != nil {
		return err
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, gin.H{"token": tok, "user_id": req.UserID, "role": req.Role, "expires_at": now.Add(devTokenTTL).UTC()})
	return nil
}
