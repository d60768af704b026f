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

// readyTTL is how long a readiness result is reused: /readyz is public, and
// each evaluation dials every dependency.
const readyTTL = time.Second

// GET /readyz: every dependency answered within a second. A 503 names those
// that did not, and nothing more: the reasons go to the log.
func (s *Server) readyz(c *gin.Context) {
	down, _ := s.ready.get(time.Now, readyTTL, func() ([]string, error) { return s.readyDown(c.Request.Context()), nil })
	checks := make(map[string]string, len(s.deps.Checks))
	for name := range s.deps.Checks {
		checks[name] = "ok"
	}
	for _, name := range down {
		checks[name] = "down"
	}
	if len(down) > 0 {
		c.JSON(http.StatusServiceUnavailable, gin.H{
			"error":  errorObject{Code: ErrUnavailable.Code, Message: "not ready: " + strings.Join(down, ", ") + " down"},
			"checks": checks,
		})
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "ready", "checks": checks})
}

// readyDown runs the checks at once and names the failing ones, sorted.
func (s *Server) readyDown(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		down []string
	)
	for name, check := range s.deps.Checks {
		wg.Go(func() {
			if err := check(ctx); err != nil {
				s.log.Warn("readiness check failed", "check", name, "err", err)
				mu.Lock()
				down = append(down, name)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	sort.Strings(down)
	return down
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
