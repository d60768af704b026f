package api

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill/seckill/auth"
)

// page is one embedded file of package web, read into memory at start.
type page struct {
	body        []byte
	contentType string
	etag        string
}

func loadPages(fsys fs.FS) map[string]page {
	out := make(map[string]page)
	_ = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		ct := mime.TypeByExtension(path.Ext(p))
		if ct == "" {
			ct = "application/octet-stream"
		}
		sum := sha256.Sum256(b)
		out[p] = page{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	return out
}

// contentSecurity keeps the pages to their own origin: scripts and styles
// only from the embedded files, requests only to this API, no framing.
const contentSecurity = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'"

// writePage answers one embedded file. Pages are revalidated on every load
// (no-cache with an ETag): a new binary is seen at once, an unchanged file
// costs a 304.
func (s *Server) writePage(c *gin.Context, name string) {
	p, ok := s.pages[name]
	if !ok {
		s.fail(c, ErrNoRoute)
		return
	}
	h := c.Writer.Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", p.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if strings.HasSuffix(name, ".html") {
		h.Set("Content-Security-Policy", contentSecurity)
	}
	if c.GetHeader("If-None-Match") == p.etag {
		c.Status(http.StatusNotModified)
		return
	}
	c.Data(http.StatusOK, p.contentType, p.body)
}

// GET /assets/*file: the pages' CSS and JavaScript.
func (s *Server) asset(c *gin.Context) {
	name := strings.TrimPrefix(c.Param("file"), "/")
	if name == "" || strings.Contains(name, "..") || strings.HasSuffix(name, ".html") {
		s.fail(c, ErrNoRoute)
		return
	}
	s.writePage(c, "assets/"+name)
}

// GET /api/v1/time (anyone; per-IP limit): the server's clock, which the
// pages count down against, not the browser's; dev says whether POST
// /api/v1/dev/token exists.
func (s *Server) serverTime(c *gin.Context) error {
	if err := s.allowIP(c); err != nil {
		return err
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, gin.H{"now": s.now().UTC(), "dev": s.deps.DevSecret != nil})
	return nil
}

// Development sign-in: user ids up to maxDevUser, tokens valid devTokenTTL.
const (
	maxDevUser  = 1_000_000_000
	devTokenTTL = 12 * time.Hour
)

// POST /api/v1/dev/token (development only; per-IP limit): a token for
// {"user_id": N, "role": "buyer"|"admin"} (role defaults to buyer).
func (s *Server) devToken(c *gin.Context) error {
	if err := s.allowIP(c); err != nil {
		return err
	}
	var req struct {
		UserID int64     `json:"user_id"`
		Role   auth.Role `json:"role"`
	}
	if err := readJSON(c, &req, `body must be {"user_id": N, "role": "buyer" or "admin"}`); err != nil {
		return err
	}
	if req.Role == "" {
		req.Role = auth.RoleBuyer
	}
	switch {
	case req.UserID < 1 || req.UserID > maxDevUser:
		return badRequest("user_id: must be between 1 and 1000000000")
	case req.Role != auth.RoleBuyer && req.Role != auth.RoleAdmin:
		return badRequest(`role: must be "buyer" or "admin"`)
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
