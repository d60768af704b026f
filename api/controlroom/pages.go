package controlroom

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/gin-gonic/gin"
)

// page is one embedded file of package web.
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

// contentSecurity keeps the pages to their own origin, unframed.
const contentSecurity = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'"

// writePage answers one embedded file, revalidated on every load (ETag).
func (rm *Room) writePage(c *gin.Context, name string) {
	p, ok := rm.pages[name]
	if !ok {
		rm.d.NotFound(c)
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
func (rm *Room) asset(c *gin.Context) {
	name := strings.TrimPrefix(c.Param("file"), "/")
	if name == "" || strings.Contains(name, "..") || strings.HasSuffix(name, ".html") {
		rm.d.NotFound(c)
		return
	}
	rm.writePage(c, "assets/"+name)
}
