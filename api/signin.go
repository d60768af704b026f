package api

import (
	"encoding/base64"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/events"
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

// EventKey is a public key order events are signed with (docs/events.md).
type EventKey struct {
	KeyID     string `json:"kid"`
	Alg       string `json:"alg"`        // Ed25519
	PublicKey string `json:"public_key"` // base64, 32 bytes
}

// GET /api/v1/events/keys (anyone; per-IP limit): the public keys a shop
// verifies order events with — the current one first, during a rotation
// the one before it too.
func (s *Server) eventKeys(c *gin.Context) error {
	if err := s.allowIP(c); err != nil {
		return err
	}
	keys := make([]EventKey, 0, len(s.deps.EventKeys))
	for _, k := range s.deps.EventKeys {
		keys = append(keys, EventKey{KeyID: events.KeyID(k), Alg: "Ed25519", PublicKey: base64.StdEncoding.EncodeToString(k)})
	}
	c.Header("Cache-Control", "max-age=300")
	c.JSON(http.StatusOK, gin.H{"keys": keys})
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
