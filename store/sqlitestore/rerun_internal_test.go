package sqlitestore

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicerl/sluice/store"
)

// TestTakeAllAcquireRerunStartsAfresh: a batch whose shared transaction is
// rolled back (a later call failed after writing) runs its calls again. A
// TakeAllAcquire that acquired on the first run and is refused on the
// second (another process took the permit in between) must answer refused,
// not carry the first run's Allowed over.
func TestTakeAllAcquireRerunStartsAfresh(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "x.db"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Unix(1_700_000_000, 0)
	lim := store.Limit{Name: "r", Rate: 10, Period: time.Second}
	lp := store.AcquireParams{Name: "l", Key: "k", Holder: "b", Permits: 1, TTL: time.Minute}

	// queued waits until a leader runs (blocked on s.mu) and n calls
	// wait behind it.
	queued := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
			s.qmu.Lock()
			l, leading := len(s.queue), s.leading
			s.qmu.Unlock()
			if leading && l == n {
				return
			}
			time.Sleep(time.Millisecond)
		}
		t.Fatalf("no leader with %d calls queued behind it", n)
	}
	s.mu.Lock()
	go func() { _, _ = s.Take(ctx, store.TakeParams{Key: "z", Limit: lim, Now: now}) }()
	queued(0)

	xCalls := 0
	go func() {
		_ = s.do(ctx, store.NowMicros(now), func(tx *txn) error {
			xCalls++
			if xCalls == 2 {
				// Stands in for another process committing between the
				// rollback and the rerun.
				other := lp
				other.Holder = "other"
				_, err := tx.acquire(&other)
				return err
			}
			return nil
		})
	}()
	queued(1)
	type res struct {
		r   store.TakeAllAcquireResult
		err error
	}
	done := make(chan res, 1)
	go func() {
		r, err := s.TakeAllAcquire(ctx, store.TakeAllAcquireParams{
			Items: []store.Item{{Key: "k", Limit: lim, Cost: 1}},
			Lease: lp, Now: now,
		})
		done <- res{r, err}
	}()
	queued(2)
	go func() {
		_ = s.do(ctx, store.NowMicros(now), func(tx *txn) error {
			if err := tx.put(&lim, "c", store.State{Time: store.NowMicros(now) + 1e6}, false); err != nil {
				return err
			}
			return errors.New("boom after writing")
		})
	}()
	queued(3)
	s.mu.Unlock()
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	if xCalls != 2 {
		t.Fatalf("the batch ran %d times, want 2 (a rollback and a rerun)", xCalls)
	}
	if got.r.Lease.Acquired || got.r.Allowed {
		t.Fatalf("Allowed %v, Lease.Acquired %v: the permit went to another holder before the rerun", got.r.Allowed, got.r.Lease.Acquired)
	}
}
