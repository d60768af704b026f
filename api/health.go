package api

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
)

// GET /healthz: the process serves HTTP.
func (s *Server) healthz(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"status": "ok"})
}

// GET /readyz: every dependency answered within a second. A 503 names the
// ones that did not.
func (s *Server) readyz(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), time.Second)
	defer cancel()
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		checks = make(map[string]string, len(s.deps.Checks))
		down   []string
	)
	for name, check := range s.deps.Checks {
		wg.Go(func() {
			err := check(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				checks[name] = "down: " + err.Error()
				down = append(down, name)
				return
			}
			checks[name] = "ok"
		})
	}
	wg.Wait()
	if len(down) > 0 {
		sort.Strings(down)
		c.JSON(http.StatusServiceUnavailable, gin.H{
			"error":  errorObject{Code: ErrUnavailable.Code, Message: "not ready: " + strings.Join(down, ", ") + " down"},
			"checks": checks,
		})
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "ready", "checks": checks})
}

// TCPCheck is a readiness probe that dials every address.
func TCPCheck(addrs ...string) Check {
	return func(ctx context.Context) error {
		var d net.Dialer
		for _, a := range addrs {
			conn, err := d.DialContext(ctx, "tcp", a)
			if err != nil {
				return fmt.Errorf("dial %s: %w", a, err)
			}
			_ = conn.Close()
		}
		return nil
	}
}
