package relay

import "time"

// SetTimings shortens the relay's read block and backoff cap (before Run).
func (r *Relay) SetTimings(block, maxBackoff time.Duration) {
	r.block, r.maxBackoff = block, maxBackoff
}

// Watching returns how many items have a reader now.
func (r *Relay) Watching() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.watched)
}
