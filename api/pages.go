package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/web"
)

// page is one embedded file, read once at start.
type page struct {
	body        []byte
	contentType string
	etag        string
}

// pages are the storefront, the control room and their assets (package web).
type pages map[string]page

// loadPages reads every embedded file into memory: a handful of small files,
// served without touching a disk.
func loadPages(fsys fs.FS) pages {
	out := make(pages)
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

// servePage answers one embedded file (404 NOT_FOUND for an unknown one).
// Pages are revalidated on every load (no-cache with an ETag): a new binary
// is seen at once, an unchanged file costs a 304.
func (s *Server) servePage(name string) gin.HandlerFunc {
	return func(c *gin.Context) {
		s.writePage(c, name)
	}
}

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

// timeBody is the answer of GET /api/v1/time.
type timeBody struct {
	// Now is the server's clock: the pages count down to a sale's start and
	// end and to an order's pay_by against it, not against the browser's.
	Now time.Time `json:"now"`
	// Dev says whether the development sign-in (POST /api/v1/dev/token)
	// exists on this server.
	Dev bool `json:"dev"`
}

// GET /api/v1/time (anyone; per-IP limit): the server's clock.
func (s *Server) serverTime(c *gin.Context) {
	if !s.allowIP(c) {
		return
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, timeBody{Now: s.now().UTC(), Dev: s.deps.DevTokens != nil})
}

// DevTokens issues tokens without a secret being pasted: the development
// sign-in of the pages. Only `seckill api` with SECKILL_DEV=1 passes one;
// without it the route does not exist.
type DevTokens interface {
	Issue(userID int64, role auth.Role) (token string, expiresAt time.Time, err error)
}

type devTokenRequest struct {
	UserID int64  `json:"user_id"`
	Role   string `json:"role"`
}

type devTokenBody struct {
	Token     string    `json:"token"`
	UserID    int64     `json:"user_id"`
	Role      auth.Role `json:"role"`
	ExpiresAt time.Time `json:"expires_at"`
}

// maxDevUser bounds the development sign-in's user ids (a typo of many
// digits is refused rather than minted).
const maxDevUser = 1_000_000_000

// POST /api/v1/dev/token (development only; per-IP limit): a token for
// {"user_id": N, "role": "buyer"|"admin"} (role defaults to buyer).
func (s *Server) devToken(c *gin.Context) {
	if !s.allowIP(c) {
		return
	}
	body, err := io.ReadAll(c.Request.Body)
	if err != nil {
		s.fail(c, badRequest("could not read the body"))
		return
	}
	var req devTokenRequest
	if err := json.Unmarshal(body, &req); err != nil {
		s.fail(c, badRequest(`body must be {"user_id": N, "role": "buyer" or "admin"}`))
		return
	}
	role := auth.Role(req.Role)
	if role == "" {
		role = auth.RoleBuyer
	}
	switch {
	case req.UserID < 1 || req.UserID > maxDevUser:
		s.fail(c, badRequest("user_id: must be between 1 and 1000000000"))
		return
	case role != auth.RoleBuyer && role != auth.RoleAdmin:
		s.fail(c, badRequest(`role: must be "buyer" or "admin"`))
		return
	}
	tok, exp, err := s.deps.DevTokens.Issue(req.UserID, role)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, devTokenBody{Token: tok, UserID: req.UserID, Role: role, ExpiresAt: exp.UTC()})
}

// DevIssuer signs development tokens, valid for devTokenTTL, with the API's
// own secret.
type DevIssuer struct{ Secret []byte }

const devTokenTTL = 12 * time.Hour

var _ DevTokens = DevIssuer{}

// Issue signs a token for the user and role.
func (d DevIssuer) Issue(userID int64, role auth.Role) (string, time.Time, error) {
	now := time.Now()
	tok, err := auth.Sign(d.Secret, userID, role, devTokenTTL, now)
	return tok, now.Add(devTokenTTL), err
}

// pageRoutes adds the pages and the routes only they use.
func (s *Server) pageRoutes(e *gin.Engine) {
	s.pages = loadPages(web.Files())
	e.GET("/", s.servePage("index.html"))
	e.GET("/admin", s.servePage("admin.html"))
	e.GET("/assets/*file", s.asset)
	e.GET("/api/v1/time", s.serverTime)
	e.GET("/api/v1/admin/summary", s.adminSummary)
	if s.deps.DevTokens != nil {
		e.POST("/api/v1/dev/token", s.devToken)
	}
}
