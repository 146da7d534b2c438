package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/migration"
)

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Clock is the process clock the store clock is built on. Nil means
	// the real clock.
	Clock clock.Clock
	// BusyTimeout is how long a transaction waits for another process
	// holding the file's write lock. Zero means 5 seconds.
	BusyTimeout time.Duration
	// MaxBusyWait is how long a write keeps asking for the file's write
	// lock in all: SQLite's busy handler polls, so when several processes
	// take turns with the lock one of them can be passed over for
	// BusyTimeout although no one held the lock that long (a busy
	// machine). A BEGIN refused as busy did nothing, so it is tried again
	// until MaxBusyWait has passed or no caller of the batch still waits.
	// Zero means 6 times BusyTimeout.
	MaxBusyWait time.Duration
	// SkipMigrations leaves the schema alone at Open. By default Open
	// applies every pending migration (store/migration, dialect sqlite).
	SkipMigrations bool
	// CleanupBatch is the most rows one Cleanup transaction deletes. Zero
	// means 1000.
	CleanupBatch int
}

// Store is a store.RateStore in a SQLite file. It is safe for concurrent use
// by many goroutines, and by several processes opening the same file. Build
// it with Open and release it with Close; the zero value is not usable.
type Store struct {
	db    *sql.DB
	clk   *clock.Monotonic
	batch int
	// busyWait is Config.MaxBusyWait.
	busyWait time.Duration

	qmu     sync.Mutex // guards queue, leading and closed
	queue   []*call
	leading bool
	closed  bool

	mu         sync.Mutex // held while a transaction runs, and by Close
	conn       *sql.Conn
	connClosed bool
	stmts      stmts

	wakeups    store.LeaseWakeups   // lease.go: in-process release announcements
	leaseStmts map[string]*sql.Stmt // lease.go: prepared on conn, guarded by mu
	slots      *slotStmts           // prepared on first use (slot.go)
	jobStmts   []*sql.Stmt          // jobclaim.go: by jobQuery, prepared on conn, guarded by mu
}

type stmts struct {
	begin, commit, rollback           *sql.Stmt
	clockGet, clockSet                *sql.Stmt
	get, insert, update, del, cleanup *sql.Stmt
}

var (
	_ store.RateStore  = (*Store)(nil)
	_ store.RateSharer = (*Store)(nil)
)

// Rates returns s (store.RateSharer): its leases' mixed operations charge
// its own rates.
func (s *Store) Rates() store.RateStore { return s }

// Open opens (creating if needed) the SQLite file at path and, unless
// cfg.SkipMigrations, applies pending migrations. ctx bounds the opening
// only.
func Open(ctx context.Context, path string, cfg Config) (*Store, error) {
	if path == "" || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("sqlitestore: bad path %q (empty, or holds ? or #)", path)
	}
	if cfg.BusyTimeout < 0 || cfg.CleanupBatch < 0 || cfg.MaxBusyWait < 0 {
		return nil, errors.New("sqlitestore: BusyTimeout, MaxBusyWait and CleanupBatch must be >= 0")
	}
	busy := cfg.BusyTimeout
	if busy == 0 {
		busy = 5 * time.Second
	}
	busyWait := cfg.MaxBusyWait
	if busyWait == 0 {
		busyWait = 6 * busy
	}
	batch := cfg.CleanupBatch
	if batch == 0 {
		batch = 1000
	}
	db, err := migration.OpenSQLite(ctx, path, busy)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	s := &Store{db: db, clk: clock.NewMonotonic(cfg.Clock), batch: batch, busyWait: busyWait}
	if err := s.open(ctx, cfg); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) open(ctx context.Context, cfg Config) error {
	if !cfg.SkipMigrations {
		m, err := migration.New(s.db, migration.SQLite)
		if err != nil {
			return err
		}
		if _, err := m.Up(ctx); err != nil {
			return fmt.Errorf("sqlitestore: %w", err)
		}
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlitestore: %w", err)
	}
	s.conn = conn
	prep := func(dst **sql.Stmt, query string) {
		if err != nil {
			return
		}
		*dst, err = conn.PrepareContext(ctx, query)
	}
	if _, err = conn.ExecContext(ctx, "PRAGMA temp_store = MEMORY"); err != nil {
		_ = conn.Close()
		return fmt.Errorf("sqlitestore: %w", err)
	}
	st := &s.stmts
	prep(&st.begin, "BEGIN IMMEDIATE")
	prep(&st.commit, "COMMIT")
	prep(&st.rollback, "ROLLBACK")
	prep(&st.clockGet, "SELECT at FROM sluice_clock WHERE id = 1")
	prep(&st.clockSet, "UPDATE sluice_clock SET at = ? WHERE id = 1 AND at < ?")
	prep(&st.get, "SELECT t, count, prev, fresh_at FROM sluice_rate_state WHERE name = ? AND key = ?")
	prep(&st.insert, "INSERT INTO sluice_rate_state (name, key, t, count, prev, fresh_at) VALUES (?, ?, ?, ?, ?, ?)")
	prep(&st.update, "UPDATE sluice_rate_state SET t = ?, count = ?, prev = ?, fresh_at = ? WHERE name = ? AND key = ?")
	prep(&st.del, "DELETE FROM sluice_rate_state WHERE name = ? AND key = ?")
	prep(&st.cleanup, `DELETE FROM sluice_rate_state WHERE (name, key) IN (
    SELECT name, key FROM sluice_rate_state WHERE fresh_at <= ? LIMIT ?)`)
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("sqlitestore: preparing statements (is the schema migrated?): %w", err)
	}
	return nil
}

// Close releases the file. Operations after Close return store.ErrClosed.
func (s *Store) Close() error {
	s.qmu.Lock()
	was := s.closed
	s.closed = true
	s.qmu.Unlock()
	if was {
		return nil
	}
	s.mu.Lock() // waits for a running transaction
	defer s.mu.Unlock()
	s.connClosed = true
	err := s.conn.Close() // closes its statements
	if err2 := s.db.Close(); err == nil {
		err = err2
	}
	if err != nil {
		return fmt.Errorf("sqlitestore: %w", err)
	}
	return nil
}

// call is one operation waiting to run in a group transaction.
type call struct {
	ctx      context.Context
	override int64 // Unix µs; 0 for the store clock
	f        func(tx *txn) error
	err      error
	state    int // callQueued, callRunning or callLeading; guarded by Store.qmu
	wake     chan struct{}
}

const (
	callQueued = iota
	callRunning
	callLeading
)

// maxBatch bounds how many operations share one transaction.
const maxBatch = 256

// batch is the shared part of a group transaction.
type batch struct {
	clockRead bool
	clockAt   int64 // the file's high-water mark, as read or raised so far
	clockSet  bool  // clockAt must be written back
}

// txn is one operation's view of a group transaction.
type txn struct {
	s        *Store
	b        *batch
	ctx      context.Context
	override int64
	now      int64
	wrote    bool
}

// do runs f as one atomic operation at the store time (or override, Unix
// microseconds, when non-zero) and returns once it is committed.
//
// Operations from concurrent goroutines are group-committed: the first
// caller becomes the leader and runs every operation queued at that moment
// one after another in one BEGIN IMMEDIATE transaction, so that one fsync
// covers them all, then hands the lead to the first operation that queued
// meanwhile. Each operation still sees every earlier one's writes, decides
// at its own (never decreasing) time, and is acknowledged only after the
// COMMIT that makes it durable. If one of them fails after writing, the
// batch is rolled back and its operations are rerun one transaction each.
func (s *Store) do(ctx context.Context, override int64, f func(tx *txn) error) error {
	c := &call{ctx: ctx, override: override, f: f, wake: make(chan struct{}, 1)}
	s.qmu.Lock()
	if s.closed {
		s.qmu.Unlock()
		return store.ErrClosed
	}
	s.queue = append(s.queue, c)
	if !s.leading {
		s.leading = true
		c.state = callLeading
		s.qmu.Unlock()
	} else {
		s.qmu.Unlock()
		select {
		case <-c.wake:
		case <-ctx.Done():
			s.qmu.Lock()
			if c.state == callQueued {
				// Not started: leave the queue.
				s.queue = slices.DeleteFunc(s.queue, func(o *call) bool { return o == c })
				s.qmu.Unlock()
				return ctx.Err()
			}
			s.qmu.Unlock()
			<-c.wake // running, or chosen to lead: see it through
		}
	}
	if c.state == callLeading {
		s.lead()
	}
	return c.err
}

// lead runs one batch (which includes the leader's own call), then hands
// the lead to the first queued call, if any.
func (s *Store) lead() {
	s.qmu.Lock()
	n := min(len(s.queue), maxBatch)
	calls := slices.Clone(s.queue[:n])
	s.queue = slices.Delete(s.queue, 0, n)
	for _, c := range calls {
		if c.state == callQueued {
			c.state = callRunning
		}
	}
	s.qmu.Unlock()

	s.runBatch(calls)

	s.qmu.Lock()
	var next *call
	if len(s.queue) > 0 {
		next = s.queue[0]
		next.state = callLeading
	} else {
		s.leading = false
	}
	s.qmu.Unlock()
	for _, c := range calls {
		if c.state != callLeading {
			c.wake <- struct{}{}
		}
	}
	if next != nil {
		next.wake <- struct{}{}
	}
}

// runBatch runs calls in one transaction and sets each call's err.
func (s *Store) runBatch(calls []*call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.connClosed {
		for _, c := range calls {
			c.err = store.ErrClosed
		}
		return
	}
	if !s.runTx(calls) && len(calls) > 1 {
		for _, c := range calls {
			s.runTx([]*call{c})
		}
	}
}

// runTx runs calls in one transaction. It returns false, having rolled back,
// when a call failed after writing: the caller reruns the calls one by one.
func (s *Store) runTx(calls []*call) bool {
	st := &s.stmts
	bg := context.Background()
	fail := func(err error) bool {
		for _, c := range calls {
			c.err = err
		}
		return true
	}
	if err := s.beginImmediate(calls); err != nil {
		return fail(wrap(err))
	}
	b := &batch{}
	for _, c := range calls {
		c.err = c.ctx.Err()
		if c.err != nil {
			continue
		}
		tx := &txn{s: s, b: b, ctx: c.ctx, override: c.override}
		c.err = tx.start()
		if c.err == nil {
			c.err = c.f(tx)
		}
		if c.err != nil && tx.wrote {
			// Undo the batch. Alone, the call keeps its error; in company,
			// the caller reruns each call on its own.
			_, _ = st.rollback.ExecContext(bg)
			return len(calls) == 1
		}
	}
	if b.clockSet {
		if _, err := st.clockSet.ExecContext(bg, b.clockAt, b.clockAt); err != nil {
			_, _ = st.rollback.ExecContext(bg)
			return fail(wrap(err))
		}
	}
	if _, err := st.commit.ExecContext(bg); err != nil {
		_, _ = st.rollback.ExecContext(bg)
		return fail(wrap(err))
	}
	return true
}

// beginImmediate starts calls' write transaction, asking again while the
// lock is busy, for at most Config.MaxBusyWait and while a call still
// waits.
func (s *Store) beginImmediate(calls []*call) error {
	start := time.Now()
	for {
		_, err := s.stmts.begin.ExecContext(context.Background())
		if err == nil || !migration.IsBusy(err) || time.Since(start) >= s.busyWait || !waiting(calls) {
			return err
		}
	}
}

// waiting reports whether any of calls is still waited for.
func waiting(calls []*call) bool {
	for _, c := range calls {
		if c.ctx.Err() == nil {
			return true
		}
	}
	return false
}

// start fixes the operation's time: the override, or the process clock
// clamped to the file's high-water mark.
func (tx *txn) start() error {
	if tx.override != 0 {
		tx.now = tx.override
		return nil
	}
	b := tx.b
	if !b.clockRead {
		if err := tx.s.stmts.clockGet.QueryRowContext(tx.ctx).Scan(&b.clockAt); err != nil {
			return wrap(err)
		}
		b.clockRead = true
	}
	tx.now = max(tx.s.clk.Now().UnixMicro(), b.clockAt)
	return nil
}

// get reads the state of (name, key) at tx.now: nothing once its row's
// fresh_at, exact in this dialect, has passed (store.Live). found is false
// for a key without a row (a fresh key).
func (tx *txn) get(name, key string) (st store.State, found bool, err error) {
	var fa int64
	err = tx.s.stmts.get.QueryRowContext(tx.ctx, name, key).Scan(&st.Time, &st.Count, &st.Prev, &fa)
	if errors.Is(err, sql.ErrNoRows) {
		return store.State{}, false, nil
	}
	if err != nil {
		return st, false, wrap(err)
	}
	return store.Live(st, fa, tx.now), true, nil
}

// put writes ns, which a write under l left, for (l.Name, key) as memstore
// does: an existing row always takes the new state (zeros when it is fresh
// already: store.Kept); a missing one is created only if the state holds
// something. A write raises the high-water mark.
func (tx *txn) put(l *store.Limit, key string, ns store.State, found bool) error {
	st := &tx.s.stmts
	ns, fa := store.Kept(*l, ns, tx.now)
	var err error
	switch {
	case found:
		_, err = st.update.ExecContext(tx.ctx, ns.Time, ns.Count, ns.Prev, fa, l.Name, key)
	case fa > tx.now:
		_, err = st.insert.ExecContext(tx.ctx, l.Name, key, ns.Time, ns.Count, ns.Prev, fa)
	default:
		return nil
	}
	tx.wrote = true
	if err != nil {
		return wrap(err)
	}
	if tx.override == 0 && tx.now > tx.b.clockAt {
		tx.b.clockAt, tx.b.clockSet = tx.now, true
	}
	return nil
}

func wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("sqlitestore: %w", err)
}

// Take implements store.RateStore.
func (s *Store) Take(ctx context.Context, p store.TakeParams) (store.Result, error) {
	if err := store.CheckKey(p.Key); err != nil {
		return store.Result{}, err
	}
	var res store.Result
	// Eval on a blank state validates exactly as memstore does, before
	// any I/O.
	if err := store.Eval(&p.Limit, &store.State{}, 0, p.Cost, p.MaxDelay, &res); err != nil && !errors.Is(err, store.ErrOutOfRange) {
		return store.Result{}, err
	}
	err := s.do(ctx, store.NowMicros(p.Now), func(tx *txn) error {
		st, found, err := tx.get(p.Limit.Name, p.Key)
		if err != nil {
			return err
		}
		before := st
		if err := store.Eval(&p.Limit, &st, tx.now, p.Cost, p.MaxDelay, &res); err != nil {
			return err
		}
		if st == before {
			return nil
		}
		return tx.put(&p.Limit, p.Key, st, found)
	})
	if err != nil {
		return store.Result{}, err
	}
	return res, nil
}

// TakeAll implements store.RateStore. It decides every item at one instant
// inside one transaction and writes only if all are allowed.
func (s *Store) TakeAll(ctx context.Context, p store.TakeAllParams) (store.AllResult, error) {
	if len(p.Items) == 0 {
		return store.AllResult{Allowed: true}, nil
	}
	for i := range p.Items {
		if err := p.Items[i].Check(); err != nil {
			return store.AllResult{}, err
		}
	}
	if err := store.CheckNow(p.Now); err != nil {
		return store.AllResult{}, err
	}
	var out store.AllResult
	err := s.do(ctx, store.NowMicros(p.Now), func(tx *txn) error {
		var rows allRows
		var err error
		out, rows, err = tx.decideAll(p.Items, p.MaxDelay, true)
		if err != nil || !out.Allowed {
			return err
		}
		return tx.commitAll(p.Items, rows)
	})
	if err != nil {
		return store.AllResult{}, err
	}
	return out, nil
}

// allRow is the state of one (limit name, key) row that a TakeAll's items
// share.
type allRow struct {
	key         string
	stored, cur store.State
	found       bool
	last        int // the last item that changed this row: its limit wrote it
}

// allRows are a TakeAll's rows in the order its items first name them.
type allRows []*allRow

// decideAll decides items in order at tx.now, each against its row's state
// with the charges of the items before it on that row (items on the same
// row see each other's charges); with charge false every item is a peek.
// When some item is refused, nothing will be charged, and an item that had
// room on its own says so with what it has now: a peek at its stored state.
func (tx *txn) decideAll(items []store.Item, maxDelay time.Duration, charge bool) (store.AllResult, allRows, error) {
	out := store.AllResult{Allowed: true, Results: make([]store.Result, len(items))}
	type ref struct{ name, key string }
	index := make(map[ref]*allRow, len(items))
	rows := make(allRows, 0, len(items))
	for i := range items {
		it := &items[i]
		rw := index[ref{it.Limit.Name, it.Key}]
		if rw == nil {
			st, found, err := tx.get(it.Limit.Name, it.Key)
			if err != nil {
				return out, nil, err
			}
			rw = &allRow{key: it.Key, stored: st, cur: st, found: found}
			index[ref{it.Limit.Name, it.Key}] = rw
			rows = append(rows, rw)
		}
		cost := it.Cost
		if !charge {
			cost = 0
		}
		was := rw.cur
		if err := store.Eval(&it.Limit, &rw.cur, tx.now, cost, maxDelay, &out.Results[i]); err != nil {
			return out, nil, err
		}
		if rw.cur != was {
			rw.last = i
		}
		out.Allowed = out.Allowed && out.Results[i].Allowed
	}
	if !out.Allowed {
		for i := range items {
			if out.Results[i].Allowed {
				it := &items[i]
				st := index[ref{it.Limit.Name, it.Key}].stored
				if err := store.Eval(&it.Limit, &st, tx.now, 0, 0, &out.Results[i]); err != nil {
					// Its stored state is out of range for this limit
					// (store.Eval), as on every backend.
					return out, nil, err
				}
			}
		}
	}
	return out, rows, nil
}

// commitAll writes every row that decideAll changed, under the limit of
// the last item that changed it.
func (tx *txn) commitAll(items []store.Item, rows allRows) error {
	for _, rw := range rows {
		if rw.cur == rw.stored {
			continue
		}
		if err := tx.put(&items[rw.last].Limit, rw.key, rw.cur, rw.found); err != nil {
			return err
		}
	}
	return nil
}

// update runs f on one key's state in a transaction, stores what it
// returns if that differs, and answers with a peek at it.
func (s *Store) update(ctx context.Context, key string, l *store.Limit, override int64, f func(cur store.State, now int64) (store.State, error)) (store.Result, error) {
	if err := store.CheckKey(key); err != nil {
		return store.Result{}, err
	}
	if err := l.Validate(); err != nil {
		return store.Result{}, err
	}
	var res store.Result
	err := s.do(ctx, override, func(tx *txn) error {
		cur, found, err := tx.get(l.Name, key)
		if err != nil {
			return err
		}
		ns, err := f(cur, tx.now)
		if err != nil {
			return err
		}
		if ns != cur {
			// An unchanged state is not written: one fresh under l but
			// written under another algorithm stays (store.Kept).
			if err := tx.put(l, key, ns, found); err != nil {
				return err
			}
		}
		return store.Eval(l, &ns, tx.now, 0, 0, &res)
	})
	if err != nil {
		return store.Result{}, err
	}
	return res, nil
}

// Settle implements store.RateStore.
func (s *Store) Settle(ctx context.Context, p store.SettleParams) (store.Result, error) {
	return s.update(ctx, p.Key, &p.Limit, store.NowMicros(p.Now), func(cur store.State, now int64) (store.State, error) {
		return store.EvalSettle(cur, now, &p)
	})
}

// Sync implements store.RateStore.
func (s *Store) Sync(ctx context.Context, p store.SyncParams) (store.Result, error) {
	return s.update(ctx, p.Key, &p.Limit, store.NowMicros(p.Now), func(cur store.State, now int64) (store.State, error) {
		return store.EvalSync(cur, now, &p)
	})
}

// Reset implements store.RateStore.
func (s *Store) Reset(ctx context.Context, p store.ResetParams) error {
	if err := store.CheckKey(p.Key); err != nil {
		return err
	}
	if err := store.CheckID("limit name", p.Limit.Name); err != nil {
		return err
	}
	return s.do(ctx, 0, func(tx *txn) error {
		tx.wrote = true
		_, err := tx.s.stmts.del.ExecContext(tx.ctx, p.Limit.Name, p.Key)
		return wrap(err)
	})
}

// Cleanup deletes the rows whose state equals a fresh key's at the store
// clock, Config.CleanupBatch rows per transaction so that other callers get
// the file in between, and returns how many it deleted. Deleting them never
// gives budget away; call it periodically to bound the file.
func (s *Store) Cleanup(ctx context.Context) (int64, error) {
	var total int64
	for {
		var n int64
		err := s.do(ctx, 0, func(tx *txn) error {
			tx.wrote = true
			r, err := tx.s.stmts.cleanup.ExecContext(tx.ctx, tx.now, s.batch)
			if err != nil {
				return wrap(err)
			}
			n, err = r.RowsAffected()
			return wrap(err)
		})
		total += n
		if err != nil || n < int64(s.batch) {
			return total, err
		}
	}
}

// Now returns the store clock: what the next decision would be timed at.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var now int64
	err := s.do(ctx, 0, func(tx *txn) error {
		now = tx.now
		return nil
	})
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMicro(now), nil
}
