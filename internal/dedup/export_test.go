package dedup

import "time"

// SetRecheck sets how often Run inspects again the streams found unsafe or
// unreadable (HoldBack in a relay).
func SetRecheck(g *Guard, d time.Duration) { g.recheck = d }
