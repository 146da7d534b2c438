package pgstore

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicerl/sluice/store"
)

// Leases live in sluice_lease_holder (one row per held permit) and
// sluice_lease_fence (fenced values), with PL/pgSQL functions per operation
// (migration 0003): one statement and one round trip each, on the database
// clock. Fencing tokens come from the sequence sluice_lease_token, drawn
// under the key's advisory lock: they strictly increase per key across
// holders, processes and restarts, and the rows of expired permits can be
// deleted without resetting them. A release NOTIFYs channel sluice_lease;
// WatchLease LISTENs on one connection per Store while anyone watches.

var (
	_ store.RateLeaseStore = (*Store)(nil)
	_ store.LeaseWatcher   = (*Store)(nil)
)

// SQLStateStaleToken is the SQLSTATE sluice_lease_fence raises for a stale
// token (see Fence).
const SQLStateStaleToken = "SL002"

const (
	acquireSQL = `SELECT acquired, token, expires_at, held, retry_after, at, renewed
FROM sluice_lease_acquire($1, $2, $3, $4, $5, $6)`
	renewSQL   = `SELECT sluice_lease_renew($1, $2, $3, $4, $5, $6)`
	releaseSQL = `SELECT sluice_lease_release($1, $2, $3, $4, $5)`
	holdersSQL = `SELECT holder, token, expires_at FROM sluice_lease_holder
WHERE name = $1 AND key = $2 AND expires_at > coalesce($3, sluice_rate_now()) ORDER BY token`
	fencedWriteSQL = `SELECT sluice_lease_fenced_write($1, $2, $3, $4, $5, $6)`
	fencedReadSQL  = `SELECT token, value FROM sluice_lease_fence WHERE name = $1 AND key = $2 AND field = $3`
	fenceSQL       = `SELECT sluice_lease_fence($1, $2, $3)`
)

// Fence checks, inside the caller's own transaction tx, that token still
// holds a live permit of (name, key), and keeps it from being taken over
// until tx ends: a write made in tx after a nil return commits before any
// successor gets the permit, or not at all. It returns store.ErrStaleToken
// for a stale token; tx is then aborted and must be rolled back. tx may be
// a pgx.Tx or anything that runs a query in the transaction; the SQL form
// is `SELECT sluice_lease_fence(name, key, token)`, which raises SQLSTATE
// SL002 (SQLStateStaleToken).
func Fence(ctx context.Context, tx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}, name, key string, token int64) error {
	if err := store.CheckLeaseKey(name, key); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, fenceSQL, name, key, token); err != nil {
		return leaseErr("fence", err)
	}
	return nil
}

func leaseErr(op string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == SQLStateStaleToken {
		return store.ErrStaleToken
	}
	return wrap(op, err)
}

type acquireRow struct {
	acquired, renewed               bool
	token, expires, held, retry, at int64
}

func (r *acquireRow) result(p *store.AcquireParams) store.AcquireResult {
	res := store.AcquireResult{Acquired: r.acquired, Held: r.held, At: r.at,
		RetryAfter: time.Duration(r.retry) * time.Microsecond}
	if r.acquired {
		res.Renewed = r.renewed
		res.Lease = store.Lease{Name: p.Name, Key: p.Key, Holder: p.Holder, Token: r.token, Expires: r.expires}
	}
	return res
}

func acquireArgs(p *store.AcquireParams, now *int64) []any {
	return []any{p.Name, p.Key, p.Holder, p.Permits, p.TTL.Microseconds(), now}
}

// Acquire implements store.LeaseStore.
func (s *Store) Acquire(ctx context.Context, p store.AcquireParams) (store.AcquireResult, error) {
	if err := p.Check(); err != nil {
		return store.AcquireResult{}, err
	}
	var r acquireRow
	if err := s.queryRow(ctx, acquireSQL, acquireArgs(&p, nowArg(p.Now))...).
		Scan(&r.acquired, &r.token, &r.expires, &r.held, &r.retry, &r.at, &r.renewed); err != nil {
		return store.AcquireResult{}, wrap("acquire", err)
	}
	return r.result(&p), nil
}

// Renew implements store.LeaseStore.
func (s *Store) Renew(ctx context.Context, p store.RenewParams) (store.Lease, error) {
	if err := p.Check(); err != nil {
		return store.Lease{}, err
	}
	var exp *int64
	if err := s.queryRow(ctx, renewSQL, p.Name, p.Key, p.Holder, p.Token, p.TTL.Microseconds(), nowArg(p.Now)).Scan(&exp); err != nil {
		return store.Lease{}, wrap("renew", err)
	}
	if exp == nil {
		return store.Lease{}, store.ErrLeaseNotHeld
	}
	return store.Lease{Name: p.Name, Key: p.Key, Holder: p.Holder, Token: p.Token, Expires: *exp}, nil
}

// Release implements store.LeaseStore.
func (s *Store) Release(ctx context.Context, p store.ReleaseParams) error {
	if err := p.Check(); err != nil {
		return err
	}
	var ok bool
	if err := s.queryRow(ctx, releaseSQL, p.Name, p.Key, p.Holder, p.Token, nowArg(p.Now)).Scan(&ok); err != nil {
		return wrap("release", err)
	}
	if !ok {
		return store.ErrLeaseNotHeld
	}
	return nil
}

// Holders implements store.LeaseStore.
func (s *Store) Holders(ctx context.Context, p store.HoldersParams) ([]store.Lease, error) {
	if err := store.CheckLeaseKey(p.Name, p.Key); err != nil {
		return nil, err
	}
	if err := store.CheckNow(p.Now); err != nil {
		return nil, err
	}
	var out []store.Lease
	err := retryStray(ctx, func() error {
		rows, err := s.pool.Query(ctx, holdersSQL, p.Name, p.Key, nowArg(p.Now))
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Lease, error) {
			l := store.Lease{Name: p.Name, Key: p.Key}
			err := r.Scan(&l.Holder, &l.Token, &l.Expires)
			return l, err
		})
		return err
	})
	if err != nil {
		return nil, wrap("holders", err)
	}
	if out == nil {
		out = []store.Lease{}
	}
	return out, nil
}

// FencedWrite implements store.LeaseStore.
func (s *Store) FencedWrite(ctx context.Context, p store.FencedWriteParams) error {
	if err := p.Check(); err != nil {
		return err
	}
	v := p.Value
	if v == nil {
		v = []byte{}
	}
	var ok bool
	if err := s.queryRow(ctx, fencedWriteSQL, p.Name, p.Key, p.Token, p.Field, v, nowArg(p.Now)).Scan(&ok); err != nil {
		return wrap("fenced write", err)
	}
	if !ok {
		return store.ErrStaleToken
	}
	return nil
}

// FencedRead implements store.LeaseStore.
func (s *Store) FencedRead(ctx context.Context, p store.FencedReadParams) (store.FencedValue, bool, error) {
	if err := store.CheckLeaseKey(p.Name, p.Key); err != nil {
		return store.FencedValue{}, false, err
	}
	var v store.FencedValue
	err := s.queryRow(ctx, fencedReadSQL, p.Name, p.Key, p.Field).Scan(&v.Token, &v.Value)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.FencedValue{}, false, nil
	}
	if err != nil {
		return store.FencedValue{}, false, wrap("fenced read", err)
	}
	return v, true, nil
}

// TakeAllAcquire implements store.RateLeaseStore in one transaction: the
// lease first (under its key's advisory lock), then the rate items, and a
// rollback unless both succeed. A refused lease commits its refusal only
// (the holders are marked contended, see sluice_lease_release), never a
// rate change.
func (s *Store) TakeAllAcquire(ctx context.Context, p store.TakeAllAcquireParams) (out store.TakeAllAcquireResult, err error) {
	lp := p.Lease
	if err := lp.Check(); err != nil {
		return out, err
	}
	n := len(p.Items)
	names := make([]string, n)
	keys := make([]string, n)
	algs := make([]int32, n)
	lims := make([]int64, n)
	ivs := make([]int64, n)
	costs := make([]int64, n)
	for i := range p.Items {
		it := &p.Items[i]
		if err := it.Check(); err != nil {
			return out, err
		}
		names[i], keys[i], costs[i] = it.Limit.Name, it.Key, it.Cost
		algs[i], lims[i], ivs[i] = params(&it.Limit)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return out, wrap("take all acquire", err)
	}
	commit := false
	defer func() {
		if !commit {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	now := nowArg(p.Now)
	var r acquireRow
	if err := tx.QueryRow(ctx, acquireSQL, acquireArgs(&lp, now)...).
		Scan(&r.acquired, &r.token, &r.expires, &r.held, &r.retry, &r.at, &r.renewed); err != nil {
		return out, wrap("take all acquire", err)
	}
	out.Lease = r.result(&lp)
	var q pgx.Tx = tx
	if !r.acquired {
		// A peek at the rates, rolled back to a savepoint; the refused
		// acquire itself commits, so that it marks the holders contended
		// and their release is announced to waiters.
		clear(costs)
		if q, err = tx.Begin(ctx); err != nil {
			return out, wrap("take all acquire", err)
		}
	}
	if now == nil {
		now = &r.at // the rates decide at the lease's instant
	}
	out.Rates = store.AllResult{Allowed: true, Results: make([]store.Result, n)}
	if n > 0 {
		rows, err := q.Query(ctx, takeAllSQL, names, keys, algs, lims, ivs, costs, int64(0), now)
		if err != nil {
			return out, wrap("take all acquire", err)
		}
		i := 0
		for rows.Next() {
			if i >= n {
				rows.Close()
				return out, wrap("take all acquire", errors.New("more results than items"))
			}
			rr := row{limit: p.Items[i].Limit.Max()}
			if err := rows.Scan(&rr.allowed, &rr.remaining, &rr.retry, &rr.reset, &rr.delay, &rr.at); err != nil {
				rows.Close()
				return out, wrap("take all acquire", err)
			}
			out.Rates.Results[i] = rr.result()
			out.Rates.Allowed = out.Rates.Allowed && rr.allowed
			i++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return out, wrap("take all acquire", err)
		}
		if i != n {
			return out, wrap("take all acquire", fmt.Errorf("%d results for %d items", i, n))
		}
	}
	if !r.acquired {
		if err := q.Rollback(ctx); err != nil {
			return out, wrap("take all acquire", err)
		}
		if err := tx.Commit(ctx); err != nil {
			return out, wrap("take all acquire", err)
		}
		commit = true
		return out, nil
	}
	if !out.Rates.Allowed {
		// Rolled back: a new permit is not held, a renewed one still is.
		out.Lease = store.AcquireResult{Held: r.held, At: r.at}
		if !r.renewed {
			out.Lease.Held--
		}
		return out, nil
	}
	if err := tx.Commit(ctx); err != nil {
		return out, wrap("take all acquire", err)
	}
	commit = true
	out.Allowed = true
	return out, nil
}

func wakeID(name, key string) string {
	h := md5.Sum([]byte(name + "\x1f" + key))
	return hex.EncodeToString(h[:])
}

// WatchLease implements store.LeaseWatcher: while any watch is open, one
// connection of the pool (taken out of it) LISTENs on sluice_lease.
func (s *Store) WatchLease(ctx context.Context, name, key string) (<-chan struct{}, func(), error) {
	if err := store.CheckLeaseKey(name, key); err != nil {
		return nil, nil, err
	}
	return s.listener.Watch(ctx, wakeID(name, key), s.listen)
}

// listen takes a connection out of the pool and LISTENs on it; see
// store.LeaseSubscribe.
func (s *Store) listen(ctx context.Context, wake *store.LeaseWakeups) (func(), <-chan struct{}, error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, wrap("listen", err)
	}
	conn := pc.Hijack() // ours alone: LISTEN must not leak into the pool
	if _, err := conn.Exec(ctx, "LISTEN sluice_lease"); err != nil {
		_ = conn.Close(context.Background())
		return nil, nil, wrap("listen", err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = conn.Close(context.Background()) }()
		for {
			n, err := conn.WaitForNotification(lctx)
			if err != nil {
				// Lost (or stopped): wake every watcher so that none waits
				// on a notification that cannot come.
				wake.WakeAll()
				return
			}
			wake.Wake(n.Payload)
		}
	}()
	return func() { cancel(); <-done }, done, nil
}

const cleanupLeasesSQL = `DELETE FROM sluice_lease_holder
WHERE (name, key, holder) IN (
    SELECT name, key, holder FROM sluice_lease_holder
    WHERE expires_at <= sluice_rate_now()
    LIMIT $1
    FOR UPDATE SKIP LOCKED)
AND expires_at <= sluice_rate_now()`

// CleanupLeases deletes the rows of expired permits at the database clock,
// Config.CleanupBatch at a time, skipping rows a transaction holds (a
// Fence), and returns how many it deleted. Acquires delete their key's
// expired rows themselves; call it periodically to drop the rows of keys
// nobody acquires any more. Tokens never reset: they come from a sequence.
func (s *Store) CleanupLeases(ctx context.Context) (int64, error) {
	var total int64
	for {
		tag, err := s.exec(ctx, cleanupLeasesSQL, s.batch)
		if err != nil {
			return total, wrap("cleanup leases", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(s.batch) {
			return total, nil
		}
	}
}
