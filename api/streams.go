package api

import "sync"

// streamCounts caps the open order event streams: each holds a goroutine, a
// subscription and buffers for up to EventsMax, so one valid token must not
// be able to open them without limit.
type streamCounts struct {
	mu      sync.Mutex
	total   int
	byBuyer map[int64]int
}

// acquire opens a stream slot for the buyer; ok is false past perBuyer open
// streams of that buyer or max in all. release frees the slot.
func (s *streamCounts) acquire(buyer int64, perBuyer, max int) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byBuyer == nil {
		s.byBuyer = make(map[int64]int)
	}
	if s.total >= max || s.byBuyer[buyer] >= perBuyer {
		return nil, false
	}
	s.total++
	s.byBuyer[buyer]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.total--
		if s.byBuyer[buyer]--; s.byBuyer[buyer] <= 0 {
			delete(s.byBuyer, buyer)
		}
	}, true
}
