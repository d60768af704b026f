package relay

import "time"

// SetTimings shortens the relay's read block and backoff cap (before Run).
func (r *Relay) SetTimings(block, maxBackoff time.Duration) {
	r.block, r.maxBackoff = block, maxBackoff
}
