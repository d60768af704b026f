package auth

import "time"

// SetClock makes v read the time from now (tests only).
func (v *OIDC) SetClock(now func() time.Time) { v.now = now }
