package table

import (
	"context"
	"time"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// tableStall is the StallSource of the bridge table's relay.
type tableStall struct {
	store *outbox.Store
	sub   *Subscriber
}

func (t tableStall) LastProgress() time.Time { return t.sub.LastClaim() }

func (t tableStall) Stalled(ctx context.Context, after time.Duration) (bool, string, error) {
	stalled, err := t.store.Stalled(ctx, after)
	return stalled, "rows have been claimable for longer than relay.stall_after and this relay claimed none", err
}

// Excuse: a stall while the claims fail is the database's doing — it
// cannot be reached, it refuses the relay's writes (read-only, after a
// failover), a privilege is missing — and a restart would not change it:
// readiness fails (Subscriber.Ready, the database check) and names it.
func (t tableStall) Excuse() string {
	if t.sub.ClaimsFailing() {
		return "the claims fail"
	}
	return ""
}
