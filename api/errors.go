package api

import (
	"net/http"
	"runtime/debug"

	"github.com/gin-gonic/gin"

	"github.com/seckill/seckill/api/apierr"
)

// fail writes err's answer and stops the handler chain (every route's).
func (s *Server) fail(c *gin.Context, err error) {
	e := apierr.To(err)
	if e.Status >= 500 {
		s.log.Warn("request failed", "route", c.FullPath(), "status", e.Status, "err", err)
	}
	s.metrics.rejected(e.Code)
	apierr.Write(c, e)
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
				s.metrics.rejected(apierr.ErrInternal.Code)
				apierr.Write(c, apierr.ErrInternal)
			}
		}()
		c.Next()
	}
}
