package main

import (
	"log/slog"
	"os"
	"runtime/debug"
)

// setMemoryLimit gives the process a soft memory limit of mb MiB unless the
// environment's GOMEMLIMIT (already applied by the runtime) sets one, or mb
// is 0. Under it the collector works harder rather than let the heap double
// (GOGC) during a stampede; it is a target, not a cap: the process never
// fails for crossing it.
func setMemoryLimit(role string, mb int, log *slog.Logger) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.Info("soft memory limit from GOMEMLIMIT", "role", role, "limit", v)
		return
	}
	if mb <= 0 {
		return
	}
	debug.SetMemoryLimit(int64(mb) << 20)
	log.Info("soft memory limit", "role", role, "mib", mb)
}
