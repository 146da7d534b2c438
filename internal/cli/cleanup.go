package cli

import (
	"context"
	"log/slog"
	"time"
)

// DefaultCleanupInterval is how often serve drops stale rows from a SQLite
// or PostgreSQL state store without --cleanup-interval.
const DefaultCleanupInterval = time.Minute

// cleanupTimeout bounds one pass of one cleanup.
const cleanupTimeout = 30 * time.Second

// cleanup is one periodic deletion a state store offers: rate rows whose
// state equals a fresh key (Cleanup), or the rows of expired permits
// (CleanupLeases). Both delete in batches and give nothing away.
type cleanup struct {
	what string
	run  func(ctx context.Context) (int64, error)
}

// cleanupsOf returns the cleanups store s offers.
func cleanupsOf(s any) []cleanup {
	var cs []cleanup
	if c, ok := s.(interface {
		Cleanup(context.Context) (int64, error)
	}); ok {
		cs = append(cs, cleanup{"rate state", c.Cleanup})
	}
	if c, ok := s.(interface {
		CleanupLeases(context.Context) (int64, error)
	}); ok {
		cs = append(cs, cleanup{"expired leases", c.CleanupLeases})
	}
	return cs
}

// runCleanups runs every cleanup once per interval until ctx ends, logging
// what each pass deleted (debug) and what failed (warn). A failed pass is
// tried again at the next tick; nothing else depends on it.
func runCleanups(ctx context.Context, log *slog.Logger, cs []cleanup, interval time.Duration) {
	if len(cs) == 0 || interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, c := range cs {
			cctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
			n, err := c.run(cctx)
			cancel()
			switch {
			case err != nil && ctx.Err() == nil:
				log.Warn("cleanup failed", "what", c.what, "deleted", n, "err", err)
			case n > 0:
				log.Debug("cleanup", "what", c.what, "deleted", n)
			}
		}
	}
}
