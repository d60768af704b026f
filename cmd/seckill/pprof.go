package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// serveAside serves srv on a listener of its own at srv.Addr (pprof, the
// API's /metrics with SECKILL_API_METRICS_ADDR) and pushes its close onto
// d's closers.
func serveAside(d *deps, what string, srv *http.Server) error {
	ln, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		return fmt.Errorf("%s: listen on %s: %w", what, srv.Addr, err)
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Warn(what+" server", "err", err)
		}
	}()
	d.onClose(quietly(srv.Close))
	d.log.Info(what+" listening", "addr", "http://"+ln.Addr().String())
	return nil
}

// pprofServer serves net/http/pprof on addr (its own mux, not the API's).
func pprofServer(addr string) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}
