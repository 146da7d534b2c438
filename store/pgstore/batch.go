package pgstore

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// takeCall is one Take waiting to be sent.
type takeCall struct {
	ctx  context.Context
	args [8]any
	name string
	key  string
	row  row
	err  error
	// sent is guarded by Store.bmu: the call has left the queue.
	sent bool
	wake chan struct{} // receives once row and err are set
}

// take decides one Take, batched with whatever other Takes are waiting.
//
// At most Config.MaxInFlight requests are on the wire at once. A Take that
// finds room runs on its own; the others queue, and each sender, when its
// request returns, sends everything queued (up to Config.MaxBatch) in one
// pgx batch, which PostgreSQL runs as one implicit transaction: one round
// trip and one commit (one WAL flush) for all of them. Each Take is still
// its own statement, sees the ones before it, and is answered only after
// the commit. A batch is sorted by (name, key), the order TakeAll locks
// in, so that concurrent batches and TakeAlls always lock rows in one order
// and never deadlock. A caller whose context ends stops waiting at once; if
// its Take was already sent, it may still be charged (never the other way
// round).
func (s *Store) take(c *takeCall) error {
	s.bmu.Lock()
	if s.inFlight < s.maxInFlight {
		s.inFlight++
		s.bmu.Unlock()
		err := s.takeOne(c.ctx, c)
		s.sendLoop()
		return err
	}
	c.wake = make(chan struct{}, 1)
	s.pending = append(s.pending, c)
	s.bmu.Unlock()
	select {
	case <-c.wake:
		return c.err
	case <-c.ctx.Done():
		s.bmu.Lock()
		if !c.sent {
			s.pending = slices.DeleteFunc(s.pending, func(o *takeCall) bool { return o == c })
		}
		s.bmu.Unlock()
		return c.ctx.Err()
	}
}

// sendLoop is run by a sender whose request returned: it hands the queued
// Takes to a background sender, or gives its place up when none wait.
func (s *Store) sendLoop() {
	s.bmu.Lock()
	if len(s.pending) == 0 {
		s.inFlight--
		s.bmu.Unlock()
		return
	}
	s.bmu.Unlock()
	go s.drain()
}

// drain sends the queued Takes in batches until none are left.
func (s *Store) drain() {
	for {
		s.bmu.Lock()
		n := min(len(s.pending), s.maxBatch)
		if n == 0 {
			s.inFlight--
			s.bmu.Unlock()
			return
		}
		calls := slices.Clone(s.pending[:n])
		s.pending = slices.Delete(s.pending, 0, n)
		for _, c := range calls {
			c.sent = true
		}
		s.bmu.Unlock()
		s.send(calls)
		for _, c := range calls {
			c.wake <- struct{}{}
		}
	}
}

// send runs calls and sets each one's row or err.
func (s *Store) send(calls []*takeCall) {
	live := calls[:0:0]
	for _, c := range calls {
		if err := c.ctx.Err(); err != nil {
			c.err = err
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := batchContext(live)
	defer cancel()
	if len(live) == 1 || s.maxBatch == 1 {
		for _, c := range live {
			c.err = s.takeOne(ctx, c)
		}
		return
	}
	slices.SortStableFunc(live, func(a, b *takeCall) int {
		return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.key, b.key))
	})
	b := &pgx.Batch{}
	for _, c := range live {
		b.Queue(takeSQL, c.args[:]...)
	}
	br := s.pool.SendBatch(ctx, b)
	var err error
	for _, c := range live {
		if err == nil {
			err = br.QueryRow().Scan(&c.row.allowed, &c.row.remaining, &c.row.retry, &c.row.reset, &c.row.delay, &c.row.at)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		return
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// A statement failed and took the batch's transaction with it:
		// nothing was committed. Run each Take on its own.
		for _, c := range live {
			c.err = s.takeOne(ctx, c)
		}
		return
	}
	// The connection failed; whether the commit happened is unknown.
	for _, c := range live {
		c.err = wrap("take", err)
	}
}

func (s *Store) takeOne(ctx context.Context, c *takeCall) error {
	err := s.queryRow(ctx, takeSQL, c.args[:]...).
		Scan(&c.row.allowed, &c.row.remaining, &c.row.retry, &c.row.reset, &c.row.delay, &c.row.at)
	if err != nil {
		return wrap("take", err)
	}
	return nil
}

// batchContext returns a context that ends at the latest deadline of the
// calls (none if any call has none). A caller whose own context ends
// earlier stops waiting for the batch on its own.
func batchContext(calls []*takeCall) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, c := range calls {
		d, ok := c.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.Background())
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.Background(), latest)
}
