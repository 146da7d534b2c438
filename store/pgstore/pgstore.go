package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/migration"
)

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// CleanupBatch is the most rows one Cleanup statement deletes. Zero
	// means 1000.
	CleanupBatch int
	// MaxInFlight is how many Take requests may be on the wire at once;
	// Takes beyond it queue and go out together, MaxBatch at a time, in
	// one round trip and one commit (see Store.Take). Zero means 4, or,
	// when MaxBatch is 1 (no batching), the pool's MaxConns, so that
	// unbatched takes can use every connection.
	MaxInFlight int
	// MaxBatch is the most Take calls sent in one batch. Zero means 64; 1
	// turns batching off (every Take is sent on its own, MaxInFlight at a
	// time).
	MaxBatch int
}

// Store is a store.RateStore on PostgreSQL. It is safe for concurrent use
// by any number of goroutines and processes. Build it with New; the zero
// value is not usable. It does not own the pool.
type Store struct {
	pool     *pgxpool.Pool
	batch    int
	maxBatch int

	maxInFlight int
	bmu         sync.Mutex // guards pending and inFlight
	pending     []*takeCall
	inFlight    int

	listener store.LeaseListener // lease.go: LISTEN for released permits
}

var (
	_ store.RateStore  = (*Store)(nil)
	_ store.RateSharer = (*Store)(nil)
)

// Rates returns s (store.RateSharer): its leases' mixed operations charge
// its own rates.
func (s *Store) Rates() store.RateStore { return s }

// New returns a Store over pool. The pool's search_path must reach the
// migrated schema (see Migrate). New does no I/O.
func New(pool *pgxpool.Pool, cfg Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("pgstore: nil pool")
	}
	if cfg.CleanupBatch < 0 || cfg.MaxBatch < 0 || cfg.MaxInFlight < 0 {
		return nil, errors.New("pgstore: CleanupBatch, MaxBatch and MaxInFlight must be >= 0")
	}
	b := cfg.CleanupBatch
	if b == 0 {
		b = 1000
	}
	mb := cfg.MaxBatch
	if mb == 0 {
		mb = 64
	}
	mf := cfg.MaxInFlight
	if mf == 0 {
		mf = 4
		if mb == 1 {
			mf = max(int(pool.Config().MaxConns), 1)
		}
	}
	return &Store{pool: pool, batch: b, maxBatch: mb, maxInFlight: mf}, nil
}

// Migrate applies every pending PostgreSQL migration through pool, in the
// pool's current schema. It is safe to call from several processes at once.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]migration.Step, error) {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	m, err := migration.New(db, migration.Postgres)
	if err != nil {
		return nil, err
	}
	return m.Up(ctx)
}

const (
	takeSQL = `SELECT allowed, remaining, retry_after, reset_after, delay, at
FROM sluice_rate_take($1, $2, $3, $4, $5, $6, $7, $8)`
	takeAllSQL = `SELECT allowed, remaining, retry_after, reset_after, delay, at
FROM sluice_rate_take_all($1, $2, $3, $4, $5, $6, $7, $8) ORDER BY ord`
	settleSQL = `SELECT allowed, remaining, retry_after, reset_after, delay, at
FROM sluice_rate_settle($1, $2, $3, $4, $5, $6, $7, $8, $9)`
	syncSQL = `SELECT allowed, remaining, retry_after, reset_after, delay, at
FROM sluice_rate_sync($1, $2, $3, $4, $5, $6, $7, $8)`
	resetSQL   = `DELETE FROM sluice_rate_state WHERE name = $1 AND key = $2`
	cleanupSQL = `DELETE FROM sluice_rate_state
WHERE (name, key) IN (
    SELECT name, key FROM sluice_rate_state
    WHERE fresh_at <= sluice_rate_now()
    LIMIT $1
    FOR UPDATE SKIP LOCKED)
AND fresh_at <= sluice_rate_now()`
)

// params returns a validated limit as the three numbers the SQL functions
// take: algorithm, burst or window limit, and emission interval or window
// length in microseconds.
func params(l *store.Limit) (alg int32, lim, iv int64) {
	if l.Algorithm == store.GCRA {
		g := l.GCRA()
		return int32(l.Algorithm), g.Burst, g.Interval()
	}
	return int32(l.Algorithm), l.Rate, l.Period.Microseconds()
}

// nowArg is the Now override as a SQL argument: NULL for the database clock.
func nowArg(t time.Time) *int64 {
	us := store.NowMicros(t)
	if us == 0 {
		return nil
	}
	return &us
}

type row struct {
	allowed                            bool
	remaining, retry, reset, delay, at int64
	limit                              int64 // from Go: Result.Limit
}

func (r *row) result() store.Result {
	return store.Result{
		Allowed:    r.allowed,
		Limit:      r.limit,
		Remaining:  r.remaining,
		RetryAfter: time.Duration(r.retry) * time.Microsecond,
		ResetAfter: time.Duration(r.reset) * time.Microsecond,
		Delay:      time.Duration(r.delay) * time.Microsecond,
		At:         r.at,
	}
}

const (
	// sqlStateCostExceeds is raised by the SQL functions for a settle
	// charge past what the arithmetic can hold (store.ErrCostExceedsLimit).
	sqlStateCostExceeds = "SL001"
	// sqlStateOutOfRange is raised by the SQL functions for a write of a
	// state beyond 2^53 (store.ErrOutOfRange; SL002 is the lease fence's
	// SQLStateStaleToken, which users' own SQL sees); the constraint
	// sluice_rate_state_exact holds the inline GCRA take to the same.
	sqlStateOutOfRange = "SL003"
	exactConstraint    = "sluice_rate_state_exact"
)

func wrap(op string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == sqlStateQueryCanceled:
			return fmt.Errorf("pgstore: %s: %w", op, &timeoutErr{pe})
		case pe.Code == sqlStateCostExceeds:
			return store.ErrCostExceedsLimit
		case pe.Code == sqlStateOutOfRange || pe.ConstraintName == exactConstraint:
			return fmt.Errorf("pgstore: %s: %w", op, store.ErrOutOfRange)
		case requestSQLState(pe.Code):
			// The request carried a value the database refuses (a key
			// that is not valid UTF-8 or holds NUL, a number out of
			// range, a key too long to index): an answer about the
			// request, not a store failure.
			return fmt.Errorf("pgstore: %s: %w: %s (SQLSTATE %s)", op, store.ErrInvalidValue, pe.Message, pe.Code)
		}
	}
	return fmt.Errorf("pgstore: %s: %w", op, err)
}

// requestSQLState reports whether a SQLSTATE blames the request's values:
// class 22 (data exception: 22021 character_not_in_repertoire, 22P05
// untranslatable_character, 22003 numeric_value_out_of_range, ...) and
// 54000 program_limit_exceeded (an index row too large: a huge key).
func requestSQLState(code string) bool {
	return len(code) == 5 && code[:2] == "22" || code == "54000"
}

// Take implements store.RateStore. Concurrent calls share round trips and
// commits: up to Config.MaxInFlight calls are sent at once, each on its
// own, and calls that arrive while those are out go together in one batch
// (one implicit transaction) as soon as one returns.
func (s *Store) Take(ctx context.Context, p store.TakeParams) (store.Result, error) {
	if err := store.CheckKey(p.Key); err != nil {
		return store.Result{}, err
	}
	// Eval on a blank state validates exactly as memstore does.
	var probe store.Result
	if err := store.Eval(&p.Limit, &store.State{}, 0, p.Cost, p.MaxDelay, &probe); err != nil && !errors.Is(err, store.ErrOutOfRange) {
		return store.Result{}, err
	}
	if err := store.CheckNow(p.Now); err != nil {
		return store.Result{}, err
	}
	alg, lim, iv := params(&p.Limit)
	c := takeCall{
		ctx:  ctx,
		args: [8]any{p.Limit.Name, p.Key, alg, lim, iv, p.Cost, p.MaxDelay.Microseconds(), nowArg(p.Now)},
		name: p.Limit.Name,
		key:  p.Key,
		row:  row{limit: p.Limit.Max()},
	}
	if err := s.take(&c); err != nil {
		return store.Result{}, err
	}
	return c.row.result(), nil
}

// TakeAll implements store.RateStore.
func (s *Store) TakeAll(ctx context.Context, p store.TakeAllParams) (store.AllResult, error) {
	n := len(p.Items)
	if n == 0 {
		return store.AllResult{Allowed: true}, nil
	}
	names := make([]string, n)
	keys := make([]string, n)
	algs := make([]int32, n)
	lims := make([]int64, n)
	ivs := make([]int64, n)
	costs := make([]int64, n)
	for i := range p.Items {
		it := &p.Items[i]
		if err := it.Check(); err != nil {
			return store.AllResult{}, err
		}
		names[i], keys[i], costs[i] = it.Limit.Name, it.Key, it.Cost
		algs[i], lims[i], ivs[i] = params(&it.Limit)
	}
	if err := store.CheckNow(p.Now); err != nil {
		return store.AllResult{}, err
	}
	var out store.AllResult
	err := retryStray(ctx, func() error {
		var err error
		out, err = s.takeAll(ctx, p, names, keys, algs, lims, ivs, costs)
		return err
	})
	if err != nil {
		return store.AllResult{}, wrap("take all", err)
	}
	return out, nil
}

// takeAll runs one TakeAll statement.
func (s *Store) takeAll(ctx context.Context, p store.TakeAllParams, names, keys []string, algs []int32, lims, ivs, costs []int64) (store.AllResult, error) {
	n := len(p.Items)
	rows, err := s.pool.Query(ctx, takeAllSQL, names, keys, algs, lims, ivs, costs,
		p.MaxDelay.Microseconds(), nowArg(p.Now))
	if err != nil {
		return store.AllResult{}, err
	}
	defer rows.Close()
	out := store.AllResult{Allowed: true, Results: make([]store.Result, n)}
	i := 0
	for rows.Next() {
		if i >= n {
			return store.AllResult{}, errors.New("more results than items")
		}
		r := row{limit: p.Items[i].Limit.Max()}
		if err := rows.Scan(&r.allowed, &r.remaining, &r.retry, &r.reset, &r.delay, &r.at); err != nil {
			return store.AllResult{}, err
		}
		out.Results[i] = r.result()
		out.Allowed = out.Allowed && r.allowed
		i++
	}
	if err := rows.Err(); err != nil {
		return store.AllResult{}, err
	}
	if i != n {
		return store.AllResult{}, fmt.Errorf("%d results for %d items", i, n)
	}
	return out, nil
}

// Settle implements store.RateStore.
func (s *Store) Settle(ctx context.Context, p store.SettleParams) (store.Result, error) {
	if err := store.CheckKey(p.Key); err != nil {
		return store.Result{}, err
	}
	if err := p.Limit.Validate(); err != nil {
		return store.Result{}, err
	}
	if p.Reserved < 0 || p.Actual < 0 {
		return store.Result{}, store.ErrNegativeCost
	}
	if err := store.CheckNow(p.Now); err != nil {
		return store.Result{}, err
	}
	// A settle that fails on a blank state fails on every state; the SQL
	// catches the rest (debt that would grow too large).
	if _, err := store.EvalSettle(store.State{}, 1, &p); err != nil && !errors.Is(err, store.ErrOutOfRange) {
		return store.Result{}, err
	}
	alg, lim, iv := params(&p.Limit)
	r := row{limit: p.Limit.Max()}
	err := s.queryRow(ctx, settleSQL, p.Limit.Name, p.Key, alg, lim, iv,
		p.Reserved, p.Actual, p.ReservedEnd(), nowArg(p.Now)).
		Scan(&r.allowed, &r.remaining, &r.retry, &r.reset, &r.delay, &r.at)
	if err != nil {
		return store.Result{}, wrap("settle", err)
	}
	return r.result(), nil
}

// Sync implements store.RateStore.
func (s *Store) Sync(ctx context.Context, p store.SyncParams) (store.Result, error) {
	if err := store.CheckKey(p.Key); err != nil {
		return store.Result{}, err
	}
	if err := p.Limit.Validate(); err != nil {
		return store.Result{}, err
	}
	if err := store.CheckNow(p.Now); err != nil {
		return store.Result{}, err
	}
	alg, lim, iv := params(&p.Limit)
	r := row{limit: p.Limit.Max()}
	err := s.queryRow(ctx, syncSQL, p.Limit.Name, p.Key, alg, lim, iv,
		p.Remaining, p.ResetAfter.Microseconds(), nowArg(p.Now)).
		Scan(&r.allowed, &r.remaining, &r.retry, &r.reset, &r.delay, &r.at)
	if err != nil {
		return store.Result{}, wrap("sync", err)
	}
	return r.result(), nil
}

// Reset implements store.RateStore.
func (s *Store) Reset(ctx context.Context, p store.ResetParams) error {
	if err := store.CheckKey(p.Key); err != nil {
		return err
	}
	if err := store.CheckID("limit name", p.Limit.Name); err != nil {
		return err
	}
	if _, err := s.exec(ctx, resetSQL, p.Limit.Name, p.Key); err != nil {
		return wrap("reset", err)
	}
	return nil
}

// Cleanup deletes the rows whose state equals a fresh key's at the database
// clock, in batches of Config.CleanupBatch rows, one statement (and
// transaction) per batch so that it never holds many locks for long. Rows
// locked by a running decision are skipped, and a row that a concurrent take
// revives is kept. It returns how many rows it deleted. Deleting them never
// gives budget away; call it periodically to bound the table.
func (s *Store) Cleanup(ctx context.Context) (int64, error) {
	var total int64
	for {
		tag, err := s.exec(ctx, cleanupSQL, s.batch)
		if err != nil {
			return total, wrap("cleanup", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(s.batch) {
			return total, nil
		}
	}
}

// Ping checks that the schema is in place: it calls the store clock
// function the migrations install, and returns the database clock.
func (s *Store) Ping(ctx context.Context) (time.Time, error) {
	var us int64
	if err := s.queryRow(ctx, "SELECT sluice_rate_now()").Scan(&us); err != nil {
		return time.Time{}, wrap("ping", err)
	}
	return time.UnixMicro(us), nil
}
