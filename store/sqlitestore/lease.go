package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"slices"

	"github.com/sluicerl/sluice/store"
)

// Leases live in three tables (migration 0003): one row per held permit,
// the fenced values, and one token counter for the whole file. The counter
// is never reset, so fencing tokens strictly increase per key across
// holders, processes and restarts, while the rows of expired permits can be
// deleted. Every operation is one group-committed BEGIN IMMEDIATE
// transaction on the store clock, deciding in Go with store.LeaseState.
//
// Releases are announced to WatchLease watchers of this Store only: other
// processes sharing the file learn of a freed permit by retrying.

var (
	_ store.RateLeaseStore = (*Store)(nil)
	_ store.LeaseWatcher   = (*Store)(nil)
)

// mark records that the operation wrote, raising the clock's high-water
// mark as a rate write does.
func (tx *txn) mark() {
	tx.wrote = true
	if tx.override == 0 && tx.now > tx.b.clockAt {
		tx.b.clockAt, tx.b.clockSet = tx.now, true
	}
}

// stmt returns query prepared on the store's connection, once. The store's
// mu is held (a transaction is running).
func (tx *txn) stmt(query string) (*sql.Stmt, error) {
	st := tx.s.leaseStmts[query]
	if st != nil {
		return st, nil
	}
	st, err := tx.s.conn.PrepareContext(tx.ctx, query)
	if err != nil {
		return nil, wrap(err)
	}
	if tx.s.leaseStmts == nil {
		tx.s.leaseStmts = make(map[string]*sql.Stmt)
	}
	tx.s.leaseStmts[query] = st
	return st, nil
}

func (tx *txn) queryRow(query string, args ...any) *sql.Row {
	st, err := tx.stmt(query)
	if err != nil {
		// A Row carrying the error: prepare it unprepared, which fails
		// the same way.
		return tx.s.conn.QueryRowContext(tx.ctx, query, args...)
	}
	return st.QueryRowContext(tx.ctx, args...)
}

func (tx *txn) exec(query string, args ...any) (int64, error) {
	st, err := tx.stmt(query)
	if err != nil {
		return 0, err
	}
	r, err := st.ExecContext(tx.ctx, args...)
	if err != nil {
		return 0, wrap(err)
	}
	n, err := r.RowsAffected()
	return n, wrap(err)
}

// leases loads the live holders of (name, key), deleting expired rows.
func (tx *txn) leases(name, key string) (*store.LeaseState, error) {
	n, err := tx.exec("DELETE FROM sluice_lease_holder WHERE name = ? AND key = ? AND expires_at <= ?", name, key, tx.now)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		tx.mark()
	}
	st, err := tx.stmt("SELECT holder, token, expires_at FROM sluice_lease_holder WHERE name = ? AND key = ? ORDER BY token")
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(tx.ctx, name, key)
	if err != nil {
		return nil, wrap(err)
	}
	defer rows.Close()
	ls := &store.LeaseState{}
	for rows.Next() {
		l := store.Lease{Name: name, Key: key}
		if err := rows.Scan(&l.Holder, &l.Token, &l.Expires); err != nil {
			return nil, wrap(err)
		}
		ls.Holders = append(ls.Holders, l)
	}
	return ls, wrap(rows.Err())
}

// acquire decides p in tx and writes the permit if granted.
func (tx *txn) acquire(p *store.AcquireParams) (store.AcquireResult, error) {
	st, err := tx.leases(p.Name, p.Key)
	if err != nil {
		return store.AcquireResult{}, err
	}
	before := len(st.Holders)
	res, err := st.Acquire(tx.now, p, func() (int64, error) {
		var tok int64
		err := tx.queryRow("UPDATE sluice_lease_seq SET last = last + 1 WHERE id = 1 RETURNING last").Scan(&tok)
		tx.mark()
		return tok, wrap(err)
	})
	if err != nil || !res.Acquired {
		return res, err
	}
	if len(st.Holders) > before {
		_, err = tx.exec("INSERT INTO sluice_lease_holder (name, key, holder, token, expires_at) VALUES (?, ?, ?, ?, ?)",
			p.Name, p.Key, p.Holder, res.Lease.Token, res.Lease.Expires)
	} else {
		_, err = tx.exec("UPDATE sluice_lease_holder SET expires_at = ? WHERE name = ? AND key = ? AND holder = ?",
			res.Lease.Expires, p.Name, p.Key, p.Holder)
	}
	tx.mark()
	return res, err
}

// Acquire implements store.LeaseStore.
func (s *Store) Acquire(ctx context.Context, p store.AcquireParams) (store.AcquireResult, error) {
	if err := p.Check(); err != nil {
		return store.AcquireResult{}, err
	}
	var res store.AcquireResult
	err := s.do(ctx, store.NowMicros(p.Now), func(tx *txn) (err error) {
		res, err = tx.acquire(&p)
		return err
	})
	return res, err
}

// Renew implements store.LeaseStore.
func (s *Store) Renew(ctx context.Context, p store.RenewParams) (store.Lease, error) {
	if err := p.Check(); err != nil {
		return store.Lease{}, err
	}
	var (
		l    store.Lease
		held bool
	)
	err := s.do(ctx, store.NowMicros(p.Now), func(tx *txn) error {
		exp := tx.now + p.TTL.Microseconds()
		n, err := tx.exec("UPDATE sluice_lease_holder SET expires_at = ? WHERE name = ? AND key = ? AND holder = ? AND token = ? AND expires_at > ?",
			exp, p.Name, p.Key, p.Holder, p.Token, tx.now)
		if err != nil {
			return err
		}
		held = n == 1
		if held {
			tx.mark()
			l = store.Lease{Name: p.Name, Key: p.Key, Holder: p.Holder, Token: p.Token, Expires: exp}
		}
		return nil
	})
	if err == nil && !held {
		err = store.ErrLeaseNotHeld
	}
	return l, err
}

// Release implements store.LeaseStore.
func (s *Store) Release(ctx context.Context, p store.ReleaseParams) error {
	if err := p.Check(); err != nil {
		return err
	}
	var held bool
	err := s.do(ctx, store.NowMicros(p.Now), func(tx *txn) error {
		n, err := tx.exec("DELETE FROM sluice_lease_holder WHERE name = ? AND key = ? AND holder = ? AND token = ? AND expires_at > ?",
			p.Name, p.Key, p.Holder, p.Token, tx.now)
		if err != nil {
			return err
		}
		held = n == 1
		if held {
			tx.mark()
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !held {
		return store.ErrLeaseNotHeld
	}
	s.wakeups.Wake(wakeID(p.Name, p.Key))
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
	err := s.do(ctx, store.NowMicros(p.Now), func(tx *txn) error {
		st, err := tx.leases(p.Name, p.Key)
		if err != nil {
			return err
		}
		out = st.Live(tx.now)
		return nil
	})
	return out, err
}

// FencedWrite implements store.LeaseStore.
func (s *Store) FencedWrite(ctx context.Context, p store.FencedWriteParams) error {
	if err := p.Check(); err != nil {
		return err
	}
	stale := false
	err := s.do(ctx, store.NowMicros(p.Now), func(tx *txn) error {
		var one int
		err := tx.queryRow("SELECT 1 FROM sluice_lease_holder WHERE name = ? AND key = ? AND token = ? AND expires_at > ?",
			p.Name, p.Key, p.Token, tx.now).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			stale = true
			return nil
		}
		if err != nil {
			return wrap(err)
		}
		n, err := tx.exec(`INSERT INTO sluice_lease_fence (name, key, field, token, value) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (name, key, field) DO UPDATE SET token = excluded.token, value = excluded.value
WHERE sluice_lease_fence.token <= excluded.token`, p.Name, p.Key, p.Field, p.Token, nonNil(p.Value))
		if err != nil {
			return err
		}
		stale = n == 0
		if !stale {
			tx.mark()
		}
		return nil
	})
	if err == nil && stale {
		err = store.ErrStaleToken
	}
	return err
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// FencedRead implements store.LeaseStore.
func (s *Store) FencedRead(ctx context.Context, p store.FencedReadParams) (store.FencedValue, bool, error) {
	if err := store.CheckLeaseKey(p.Name, p.Key); err != nil {
		return store.FencedValue{}, false, err
	}
	var (
		v     store.FencedValue
		found bool
	)
	err := s.do(ctx, 0, func(tx *txn) error {
		err := tx.queryRow("SELECT token, value FROM sluice_lease_fence WHERE name = ? AND key = ? AND field = ?",
			p.Name, p.Key, p.Field).Scan(&v.Token, &v.Value)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		found = err == nil
		return wrap(err)
	})
	return v, found, err
}

func wakeID(name, key string) string { return name + "\x00" + key }

// WatchLease implements store.LeaseWatcher for releases made through this
// Store.
func (s *Store) WatchLease(_ context.Context, name, key string) (<-chan struct{}, func(), error) {
	if err := store.CheckLeaseKey(name, key); err != nil {
		return nil, nil, err
	}
	ch, stop, _ := s.wakeups.Watch(wakeID(name, key))
	return ch, func() { stop() }, nil
}

// TakeAllAcquire implements store.RateLeaseStore: the rate items and the
// lease are decided in one transaction, and written only if all the items
// are allowed and the lease acquired.
func (s *Store) TakeAllAcquire(ctx context.Context, p store.TakeAllAcquireParams) (store.TakeAllAcquireResult, error) {
	lp := p.Lease
	if err := lp.Check(); err != nil {
		return store.TakeAllAcquireResult{}, err
	}
	for i := range p.Items {
		if err := p.Items[i].Check(); err != nil {
			return store.TakeAllAcquireResult{}, err
		}
	}
	var out store.TakeAllAcquireResult
	err := s.do(ctx, store.NowMicros(p.Now), func(tx *txn) error {
		// A batch may run this again after a rollback: start afresh.
		out = store.TakeAllAcquireResult{}
		st, err := tx.leases(lp.Name, lp.Key)
		if err != nil {
			return err
		}
		trial := store.LeaseState{Holders: slices.Clone(st.Holders)}
		if out.Lease, err = trial.Acquire(tx.now, &lp, func() (int64, error) { return 0, nil }); err != nil {
			return err
		}
		// Without a permit, the items are only peeked at: nothing will be
		// charged.
		var rows allRows
		if out.Rates, rows, err = tx.decideAll(p.Items, 0, out.Lease.Acquired); err != nil {
			return err
		}
		if !out.Lease.Acquired {
			return nil
		}
		if !out.Rates.Allowed {
			out.Lease = store.AcquireResult{Held: int64(len(st.Holders)), At: tx.now}
			return nil
		}
		if err := tx.commitAll(p.Items, rows); err != nil {
			return err
		}
		if out.Lease, err = tx.acquire(&lp); err != nil {
			return err
		}
		out.Allowed = out.Lease.Acquired
		return nil
	})
	if err != nil {
		return store.TakeAllAcquireResult{}, err
	}
	return out, nil
}

// CleanupLeases deletes the rows of expired permits at the store clock,
// Config.CleanupBatch rows per transaction, and returns how many it
// deleted. Acquires delete their key's expired rows themselves; call it
// periodically to drop the rows of keys nobody acquires any more. Tokens
// never reset: they come from one counter per file.
func (s *Store) CleanupLeases(ctx context.Context) (int64, error) {
	var total int64
	for {
		var n int64
		err := s.do(ctx, 0, func(tx *txn) (err error) {
			n, err = tx.exec(`DELETE FROM sluice_lease_holder WHERE (name, key, holder) IN (
    SELECT name, key, holder FROM sluice_lease_holder WHERE expires_at <= ? LIMIT ?)`, tx.now, s.batch)
			if n > 0 {
				tx.mark()
			}
			return err
		})
		total += n
		if err != nil || n < int64(s.batch) {
			return total, err
		}
	}
}

// fenceSQL is true when token holds a live permit of (name, key) at the
// store clock: the later of the caller's clock reading and the file's
// high-water mark.
const fenceSQL = `SELECT EXISTS (SELECT 1 FROM sluice_lease_holder
WHERE name = ? AND key = ? AND token = ?
  AND expires_at > max(?, (SELECT at FROM sluice_clock WHERE id = 1)))`

// Fence checks, inside the caller's own transaction tx on the same SQLite
// file, that token still holds a live permit of (name, key); it returns
// store.ErrStaleToken if not. SQLite has one writer at a time, so in a
// transaction that writes (begin it with BEGIN IMMEDIATE, or write before
// calling Fence) no successor can take the permit between the check and the
// commit: a write made in tx after a nil return commits before any
// successor's acquire, or not at all. In a transaction that has not written,
// a successor may still commit first, and SQLite then refuses tx's first
// write (SQLITE_BUSY), so a stale write still never lands. tx is a *sql.Tx,
// *sql.Conn or anything with QueryRowContext.
func (s *Store) Fence(ctx context.Context, tx interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, name, key string, token int64) error {
	if err := store.CheckLeaseKey(name, key); err != nil {
		return err
	}
	var live bool
	if err := tx.QueryRowContext(ctx, fenceSQL, name, key, token, s.clk.Now().UnixMicro()).Scan(&live); err != nil {
		return wrap(err)
	}
	if !live {
		return store.ErrStaleToken
	}
	return nil
}
