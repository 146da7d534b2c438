package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/sluicerl/sluice/store"
)

// Jobs and runs (store.JobStore). Writes run in the store's BEGIN
// IMMEDIATE group transactions, so a claim is the file's only writer while
// it picks and leases jobs: never two holders on one job, in any number of
// processes. A claim's gate is asked before its transaction, so that a
// gate that calls this same store cannot deadlock.

var _ store.JobStore = (*Store)(nil)

func overrideOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// UpsertConnector implements store.JobStore.
func (s *Store) UpsertConnector(ctx context.Context, c store.Connector) (store.Connector, bool, error) {
	if err := c.Check(); err != nil {
		return store.Connector{}, false, err
	}
	pol, err := json.Marshal(nonNilStrings(c.Policies))
	if err != nil {
		return store.Connector{}, false, err
	}
	var out store.Connector
	var created bool
	err = s.do(ctx, 0, func(tx *txn) error {
		mark(tx)
		conn := tx.s.conn
		var n int
		if err := conn.QueryRowContext(tx.ctx, `SELECT count(*) FROM sluice_job_connectors WHERE id = ?`, c.ID).Scan(&n); err != nil {
			return wrap(err)
		}
		created = n == 0
		if _, err := conn.ExecContext(tx.ctx, `INSERT INTO sluice_job_connectors (id, status, policies, profile, created_at) VALUES (?, coalesce(nullif(?, ''), 'active'), ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET status = CASE WHEN ? = '' THEN status ELSE excluded.status END, policies = excluded.policies, profile = excluded.profile`,
			c.ID, string(c.Status), string(pol), c.Profile, tx.now, string(c.Status)); err != nil {
			return wrap(err)
		}
		var err error
		out, err = store.ScanConnector(conn.QueryRowContext(tx.ctx, `SELECT `+store.ConnectorColumns+` FROM sluice_job_connectors c WHERE c.id = ?`, c.ID).Scan)
		return wrap(err)
	})
	return out, created, err
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// GetConnector implements store.JobStore.
func (s *Store) GetConnector(ctx context.Context, id string) (store.Connector, error) {
	var c store.Connector
	err := s.read(ctx, func(conn *sql.Conn) error {
		var err error
		c, err = store.ScanConnector(conn.QueryRowContext(ctx, `SELECT `+store.ConnectorColumns+` FROM sluice_job_connectors c WHERE c.id = ?`, id).Scan)
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return store.Connector{}, store.ErrConnectorNotFound
	}
	return c, wrap(err)
}

// ListConnectors implements store.JobStore.
func (s *Store) ListConnectors(ctx context.Context, p store.ListParams) ([]store.Connector, error) {
	limit, err := p.EffectiveLimit()
	if err != nil {
		return nil, err
	}
	out := []store.Connector{}
	err = s.read(ctx, func(conn *sql.Conn) error {
		rows, err := conn.QueryContext(ctx, `SELECT `+store.ConnectorColumns+` FROM sluice_job_connectors c WHERE c.id > ? ORDER BY c.id LIMIT ?`, p.After, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			c, err := store.ScanConnector(rows.Scan)
			if err != nil {
				return err
			}
			out = append(out, c)
		}
		return rows.Err()
	})
	return out, wrap(err)
}

// SetConnectorStatus implements store.JobStore.
func (s *Store) SetConnectorStatus(ctx context.Context, id string, st store.ConnectorStatus) error {
	if err := store.CheckStatus(st); err != nil {
		return err
	}
	var n int64
	err := s.do(ctx, 0, func(tx *txn) error {
		mark(tx)
		r, err := tx.s.conn.ExecContext(tx.ctx, `UPDATE sluice_job_connectors SET status = ? WHERE id = ?`, string(st), id)
		if err != nil {
			return wrap(err)
		}
		n, err = r.RowsAffected()
		return wrap(err)
	})
	if err == nil && n == 0 {
		return store.ErrConnectorNotFound
	}
	return err
}

// UpsertJob implements store.JobStore.
func (s *Store) UpsertJob(ctx context.Context, spec store.JobSpec, now time.Time) (store.Job, bool, error) {
	if err := spec.Check(); err != nil {
		return store.Job{}, false, err
	}
	var out store.Job
	var created bool
	err := s.do(ctx, overrideOf(now), func(tx *txn) error {
		conn := tx.s.conn
		var n int
		if err := conn.QueryRowContext(tx.ctx, `SELECT count(*) FROM sluice_job_connectors WHERE id = ?`, spec.ConnectorID).Scan(&n); err != nil {
			return wrap(err)
		}
		if n == 0 {
			return store.ErrConnectorNotFound
		}
		if err := conn.QueryRowContext(tx.ctx, `SELECT count(*) FROM sluice_jobs WHERE id = ?`, spec.ID).Scan(&n); err != nil {
			return wrap(err)
		}
		created = n == 0
		mark(tx)
		if _, err := conn.ExecContext(tx.ctx, `INSERT INTO sluice_jobs (id, connector_id, type, params, disabled, priority, interval_us, group_key, next_run_at, cron, time_zone)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET connector_id = excluded.connector_id, type = excluded.type, params = excluded.params,
    disabled = excluded.disabled, priority = excluded.priority, interval_us = excluded.interval_us, group_key = excluded.group_key,
    cron = excluded.cron, time_zone = excluded.time_zone`,
			spec.ID, spec.ConnectorID, spec.Type, spec.NormalParams(), spec.Disabled, spec.Priority, spec.Interval.Microseconds(), spec.Group(), tx.now,
			spec.Cron, spec.TimeZone); err != nil {
			return wrap(err)
		}
		if _, err := conn.ExecContext(tx.ctx, `INSERT INTO sluice_job_groups (group_key) VALUES (?) ON CONFLICT DO NOTHING`, spec.Group()); err != nil {
			return wrap(err)
		}
		var err error
		out, err = store.ScanJob(conn.QueryRowContext(tx.ctx, `SELECT `+store.JobColumns+` FROM sluice_jobs WHERE id = ?`, spec.ID).Scan)
		return wrap(err)
	})
	return out, created, err
}

// GetJob implements store.JobStore.
func (s *Store) GetJob(ctx context.Context, id string) (store.Job, error) {
	var j store.Job
	err := s.read(ctx, func(conn *sql.Conn) error {
		var err error
		j, err = store.ScanJob(conn.QueryRowContext(ctx, `SELECT `+store.JobColumns+` FROM sluice_jobs WHERE id = ?`, id).Scan)
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return store.Job{}, store.ErrJobNotFound
	}
	return j, wrap(err)
}

// ListJobs implements store.JobStore.
func (s *Store) ListJobs(ctx context.Context, p store.ListParams) ([]store.Job, error) {
	limit, err := p.EffectiveLimit()
	if err != nil {
		return nil, err
	}
	out := []store.Job{}
	err = s.read(ctx, func(conn *sql.Conn) error {
		rows, err := conn.QueryContext(ctx, `SELECT `+store.JobColumns+` FROM sluice_jobs
WHERE id > ? AND (? = '' OR connector_id = ?) AND (? = '' OR group_key = ?) ORDER BY id LIMIT ?`,
			p.After, p.ConnectorID, p.ConnectorID, p.GroupKey, p.GroupKey, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			j, err := store.ScanJob(rows.Scan)
			if err != nil {
				return err
			}
			out = append(out, j)
		}
		return rows.Err()
	})
	return out, wrap(err)
}

// TriggerJob implements store.JobStore.
func (s *Store) TriggerJob(ctx context.Context, id string, now time.Time) error {
	var n int64
	err := s.do(ctx, overrideOf(now), func(tx *txn) error {
		mark(tx)
		r, err := tx.s.conn.ExecContext(tx.ctx, `UPDATE sluice_jobs SET next_run_at = ?, parked_reason = '', parked_until = 0 WHERE id = ?`, tx.now, id)
		if err != nil {
			return wrap(err)
		}
		n, err = r.RowsAffected()
		return wrap(err)
	})
	if err == nil && n == 0 {
		return store.ErrJobNotFound
	}
	return err
}

// dueSQL is the condition of a claimable job j of connector c, with three
// parameters: now, now, now.
const dueSQL = `j.disabled = 0 AND j.next_run_at <= ? AND (j.lease_holder = '' OR j.lease_until <= ?)
AND c.status = 'active' AND c.pressure_until <= ?`

func typesArg(types []string) string {
	if len(types) == 0 {
		return ""
	}
	b, _ := json.Marshal(types)
	return string(b)
}

const typesSQL = ` AND (? = '' OR j.type IN (SELECT value FROM json_each(?)))`

// ClaimJobs implements store.JobStore.
func (s *Store) ClaimJobs(ctx context.Context, p store.ClaimParams) ([]store.Claim, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	types := typesArg(p.Types)
	var waits map[string]time.Duration
	if p.Gate != nil {
		var conns []string
		err := s.read(ctx, func(conn *sql.Conn) error {
			now, err := s.readNow(ctx, conn, p.Now)
			if err != nil {
				return err
			}
			rows, err := conn.QueryContext(ctx, `SELECT c.id FROM sluice_job_connectors c
WHERE c.status = 'active' AND c.pressure_until <= ? AND EXISTS (SELECT 1 FROM sluice_jobs j WHERE j.connector_id = c.id AND `+dueSQL+typesSQL+`)
ORDER BY 1`, now, now, now, now, types, types)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					return err
				}
				conns = append(conns, id)
			}
			return rows.Err()
		})
		if err != nil {
			return nil, wrap(err)
		}
		if waits, err = store.AskGate(ctx, p.Gate, conns); err != nil {
			return nil, err
		}
	}
	var out []store.Claim
	err := s.do(ctx, overrideOf(p.Now), func(tx *txn) error {
		out = nil
		conn, now := tx.s.conn, tx.now
		for id, w := range waits {
			mark(tx)
			if _, err := conn.ExecContext(tx.ctx, `UPDATE sluice_jobs SET next_run_at = max(next_run_at, ?)
WHERE connector_id = ? AND id IN (SELECT j.id FROM sluice_jobs j JOIN sluice_job_connectors c ON c.id = j.connector_id WHERE `+dueSQL+typesSQL+`)`,
				now+w.Microseconds(), id, now, now, now, types, types); err != nil {
				return wrap(err)
			}
		}
		// The groups with a claimable job, and their loads.
		rows, err := conn.QueryContext(tx.ctx, `SELECT g.group_key, g.weight,
    (SELECT count(*) FROM sluice_jobs h WHERE h.group_key = g.group_key AND h.lease_holder <> '' AND h.lease_until > ?),
    coalesce((SELECT max(m.claim_seq) FROM sluice_jobs m WHERE m.group_key = g.group_key), 0)
FROM sluice_job_groups g
WHERE EXISTS (SELECT 1 FROM sluice_jobs j JOIN sluice_job_connectors c ON c.id = j.connector_id WHERE j.group_key = g.group_key AND `+dueSQL+typesSQL+`)`,
			now, now, now, now, types, types)
		if err != nil {
			return wrap(err)
		}
		loads := map[string]store.GroupLoad{}
		var keys []string
		for rows.Next() {
			var g string
			var l store.GroupLoad
			if err := rows.Scan(&g, &l.Weight, &l.Running, &l.LastClaim); err != nil {
				rows.Close()
				return wrap(err)
			}
			loads[g] = l
			keys = append(keys, g)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return wrap(err)
		}
		for _, g := range keys {
			// A weighted group's weight-th most recent claim (SQLite
			// takes no column in OFFSET).
			if l := loads[g]; l.Weight > 1 {
				err := conn.QueryRowContext(tx.ctx, `SELECT coalesce((SELECT claim_seq FROM sluice_jobs WHERE group_key = ?
ORDER BY claim_seq DESC LIMIT 1 OFFSET ?), 0)`, g, l.Weight-1).Scan(&l.LastClaim)
				if err != nil {
					return wrap(err)
				}
				loads[g] = l
			}
		}
		store.OrderGroups(keys, loads)
		// Read the heads of the groups in fair order until there are
		// enough; then, if the rounds could take more from a group than
		// was read from it, read more from those. No row is locked by
		// anyone else: this transaction is the file's only writer.
		var cands []store.ClaimCandidate
		heads := func(key string, k int) (int, error) {
			rows, err := conn.QueryContext(tx.ctx, `SELECT j.id, j.connector_id, j.group_key, j.priority, j.next_run_at
FROM sluice_jobs j JOIN sluice_job_connectors c ON c.id = j.connector_id
WHERE j.group_key = ? AND `+dueSQL+typesSQL+`
ORDER BY j.priority DESC, j.next_run_at, j.id LIMIT ?`, key, now, now, now, types, types, k)
			if err != nil {
				return 0, err
			}
			defer rows.Close()
			n := 0
			for rows.Next() {
				var c store.ClaimCandidate
				if err := rows.Scan(&c.ID, &c.ConnectorID, &c.GroupKey, &c.Priority, &c.NextRunAt); err != nil {
					return 0, err
				}
				cands = append(cands, c)
				n++
			}
			return n, rows.Err()
		}
		var full []string
		first := 0 // what the first round takes from the groups read
		for _, k := range keys {
			if first >= p.Limit {
				break // the rounds never reach the later groups
			}
			share := store.GroupShare(p.Limit, len(keys), loads[k].Weight)
			n, err := heads(k, share)
			if err != nil {
				return wrap(err)
			}
			first += min(n, int(max(loads[k].Weight, 1)))
			if n == share && share < p.Limit {
				full = append(full, k)
			}
		}
		if len(cands) < p.Limit && len(full) > 0 {
			drop := map[string]bool{}
			for _, k := range full {
				drop[k] = true
			}
			cands = slices.DeleteFunc(cands, func(c store.ClaimCandidate) bool { return drop[c.GroupKey] })
			for _, k := range full {
				if _, err := heads(k, p.Limit); err != nil {
					return wrap(err)
				}
			}
		}
		if len(cands) == 0 {
			return nil
		}
		var seq int64
		if err := conn.QueryRowContext(tx.ctx, `SELECT coalesce(max(claim_seq), 0) FROM sluice_jobs`).Scan(&seq); err != nil {
			return wrap(err)
		}
		mark(tx)
		until := now + p.LeaseTTL.Microseconds()
		conns := map[string]store.Connector{}
		for _, i := range store.PickClaims(cands, loads, p.Limit) {
			id := cands[i].ID
			seq++
			if _, err := conn.ExecContext(tx.ctx, `UPDATE sluice_job_runs SET outcome = 'abandoned', ended_at = ?
WHERE job_id = ? AND outcome = 'running' AND token = (SELECT lease_token FROM sluice_jobs WHERE id = ? AND lease_holder <> '')`, now, id, id); err != nil {
				return wrap(err)
			}
			j, err := store.ScanJob(conn.QueryRowContext(tx.ctx, `UPDATE sluice_jobs SET lease_holder = ?, lease_token = lease_token + 1, lease_until = ?,
    claim_seq = ?, runs = runs + 1, last_run_at = ? WHERE id = ? RETURNING `+store.JobColumns, p.Holder, until, seq, now, id).Scan)
			if err != nil {
				return wrap(err)
			}
			var runID int64
			if err := conn.QueryRowContext(tx.ctx, `INSERT INTO sluice_job_runs (job_id, token, holder, started_at) VALUES (?, ?, ?, ?) RETURNING id`,
				id, j.LeaseToken, p.Holder, now).Scan(&runID); err != nil {
				return wrap(err)
			}
			c, ok := conns[j.ConnectorID]
			if !ok {
				if c, err = store.ScanConnector(conn.QueryRowContext(tx.ctx, `SELECT `+store.ConnectorRowColumns+` FROM sluice_job_connectors c WHERE c.id = ?`,
					j.ConnectorID).Scan); err != nil {
					return wrap(err)
				}
				conns[j.ConnectorID] = c
			}
			out = append(out, store.Claim{Job: j, Connector: c, RunID: runID, At: store.FromMicros(now)})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SetGroupWeight implements store.JobStore.
func (s *Store) SetGroupWeight(ctx context.Context, group string, weight int) error {
	if err := store.CheckGroupWeight(group, weight); err != nil {
		return err
	}
	return s.do(ctx, 0, func(tx *txn) error {
		mark(tx)
		_, err := tx.s.conn.ExecContext(tx.ctx, `INSERT INTO sluice_job_groups (group_key, weight) VALUES (?, ?)
ON CONFLICT (group_key) DO UPDATE SET weight = excluded.weight`, group, weight)
		return wrap(err)
	})
}

// GroupWeight implements store.JobStore.
func (s *Store) GroupWeight(ctx context.Context, group string) (int, error) {
	var w int
	err := s.read(ctx, func(conn *sql.Conn) error {
		return conn.QueryRowContext(ctx, `SELECT coalesce((SELECT weight FROM sluice_job_groups WHERE group_key = ?), 1)`, group).Scan(&w)
	})
	if err != nil {
		return 0, wrap(err)
	}
	return w, nil
}

// ListGroups implements store.JobStore.
func (s *Store) ListGroups(ctx context.Context, p store.ListParams) ([]store.Group, error) {
	limit, err := p.EffectiveLimit()
	if err != nil {
		return nil, err
	}
	out := []store.Group{}
	err = s.read(ctx, func(conn *sql.Conn) error {
		rows, err := conn.QueryContext(ctx, `SELECT group_key, weight FROM sluice_job_groups WHERE group_key > ? ORDER BY group_key LIMIT ?`, p.After, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var g store.Group
			if err := rows.Scan(&g.Key, &g.Weight); err != nil {
				return err
			}
			out = append(out, g)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, wrap(err)
	}
	return out, nil
}

// readNow is the store time for a read outside a transaction: the override,
// or the process clock clamped to the file's high-water mark.
func (s *Store) readNow(ctx context.Context, conn *sql.Conn, override time.Time) (int64, error) {
	if !override.IsZero() {
		return override.UnixMicro(), nil
	}
	var at int64
	if err := conn.QueryRowContext(ctx, `SELECT at FROM sluice_clock WHERE id = 1`).Scan(&at); err != nil {
		return 0, err
	}
	return max(s.clk.Now().UnixMicro(), at), nil
}

// held checks, inside tx, that f's token holds its job.
func held(tx *txn, f store.Fence) error {
	var token int64
	var holder string
	err := tx.s.conn.QueryRowContext(tx.ctx, `SELECT lease_token, lease_holder FROM sluice_jobs WHERE id = ?`, f.JobID).Scan(&token, &holder)
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrJobNotFound
	}
	if err != nil {
		return wrap(err)
	}
	if holder == "" || token != f.Token {
		return store.ErrStaleToken
	}
	return nil
}

// Heartbeat implements store.JobStore.
func (s *Store) Heartbeat(ctx context.Context, p store.HeartbeatParams) (time.Time, error) {
	if err := store.CheckHeartbeat(&p); err != nil {
		return time.Time{}, err
	}
	var until int64
	err := s.do(ctx, overrideOf(p.Now), func(tx *txn) error {
		if err := held(tx, p.Fence); err != nil {
			return err
		}
		mark(tx)
		until = tx.now + p.LeaseTTL.Microseconds()
		_, err := tx.s.conn.ExecContext(tx.ctx, `UPDATE sluice_jobs SET lease_until = ? WHERE id = ?`, until, p.JobID)
		return wrap(err)
	})
	if err != nil {
		return time.Time{}, err
	}
	return store.FromMicros(until), nil
}

// CommitCursor implements store.JobStore.
func (s *Store) CommitCursor(ctx context.Context, p store.CommitParams) error {
	if err := store.CheckCommit(&p); err != nil {
		return err
	}
	col := "cursor"
	if p.CatchUp {
		col = "catch_up_cursor"
	}
	return s.do(ctx, overrideOf(p.Now), func(tx *txn) error {
		if err := held(tx, p.Fence); err != nil {
			return err
		}
		mark(tx)
		if _, err := tx.s.conn.ExecContext(tx.ctx, `UPDATE sluice_jobs SET `+col+` = ? WHERE id = ?`, p.Cursor, p.JobID); err != nil {
			return wrap(err)
		}
		_, err := tx.s.conn.ExecContext(tx.ctx, `UPDATE sluice_job_runs SET slices = slices + 1 WHERE job_id = ? AND token = ?`, p.JobID, p.Token)
		return wrap(err)
	})
}

// end ends a held job's run with outcome op, then runs the outcome's own
// updates (set, with its arguments after next_run_at's).
func (s *Store) end(ctx context.Context, op string, p store.EndParams, set string, args func(tx *txn) []any, after func(tx *txn, runID int64) error) error {
	if err := store.CheckEnd(op, &p); err != nil {
		return err
	}
	return s.do(ctx, overrideOf(p.Now), func(tx *txn) error {
		if err := held(tx, p.Fence); err != nil {
			return err
		}
		mark(tx)
		conn := tx.s.conn
		var runID int64
		err := conn.QueryRowContext(tx.ctx, `UPDATE sluice_job_runs SET ended_at = ?, outcome = ?, requests = ?, retries = ?, error = ?
WHERE job_id = ? AND token = ? AND outcome = 'running' RETURNING id`, tx.now, op, p.Stats.Requests, p.Stats.Retries, p.Error, p.JobID, p.Token).Scan(&runID)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return wrap(err)
		}
		q := `UPDATE sluice_jobs SET lease_holder = '', lease_until = 0, next_run_at = ?` + set + ` WHERE id = ?`
		a := append([]any{tx.now + p.Delay.Microseconds()}, args(tx)...)
		if _, err := conn.ExecContext(tx.ctx, q, append(a, p.JobID)...); err != nil {
			return wrap(err)
		}
		if after != nil {
			return after(tx, runID)
		}
		return nil
	})
}

func noArgs(*txn) []any { return nil }

// FinishJob implements store.JobStore.
func (s *Store) FinishJob(ctx context.Context, p store.EndParams) error {
	return s.end(ctx, store.RunSucceeded, p, `, last_success_at = ?, consecutive_failures = 0, parked_reason = '', parked_until = 0`,
		func(tx *txn) []any { return []any{tx.now} }, nil)
}

// FailJob implements store.JobStore.
func (s *Store) FailJob(ctx context.Context, p store.EndParams) error {
	return s.end(ctx, store.RunFailed, p, `, failures = failures + 1, consecutive_failures = consecutive_failures + 1, last_error = ?,
    disabled = (disabled OR ?)`, func(*txn) []any { return []any{store.CutError(p.Error), p.Permanent} }, nil)
}

// ParkJob implements store.JobStore.
func (s *Store) ParkJob(ctx context.Context, p store.EndParams) error {
	return s.end(ctx, store.RunParked, p, `, parked_reason = ?, parked_until = ?`,
		func(tx *txn) []any { return []any{p.Reason, tx.now + p.Delay.Microseconds()} }, func(tx *txn, _ int64) error {
			_, err := tx.s.conn.ExecContext(tx.ctx, `UPDATE sluice_job_connectors SET pressure_until = max(pressure_until, ?)
WHERE id = (SELECT connector_id FROM sluice_jobs WHERE id = ?)`, tx.now+p.Delay.Microseconds(), p.JobID)
			return wrap(err)
		})
}

// DeferJob implements store.JobStore.
func (s *Store) DeferJob(ctx context.Context, p store.EndParams) error {
	col := "cursor"
	if p.CatchUp {
		col = "catch_up_cursor"
	}
	return s.end(ctx, store.RunDeferred, p, ``, noArgs, func(tx *txn, runID int64) error {
		_, err := tx.s.conn.ExecContext(tx.ctx, `INSERT INTO sluice_job_gaps (job_id, run_id, catch_up, cursor, reason, created_at)
SELECT id, ?, ?, `+col+`, ?, ? FROM sluice_jobs WHERE id = ?`, runID, p.CatchUp, p.Reason, tx.now, p.JobID)
		return wrap(err)
	})
}

// ReleaseJob implements store.JobStore.
func (s *Store) ReleaseJob(ctx context.Context, p store.EndParams) error {
	p.Delay = 0
	return s.end(ctx, store.RunReleased, p, ``, noArgs, nil)
}

// listNewest lists numbered records newest first.
func listNewest[T any](s *Store, ctx context.Context, p store.ListParams, q string, args []any, scan func(func(...any) error) (T, error)) ([]T, error) {
	limit, err := p.EffectiveLimit()
	if err != nil {
		return nil, err
	}
	before, err := store.ParseAfterID(p.After)
	if err != nil {
		return nil, err
	}
	if before == 0 {
		before = 1<<63 - 1
	}
	out := []T{}
	err = s.read(ctx, func(conn *sql.Conn) error {
		rows, err := conn.QueryContext(ctx, q+` AND id < ? ORDER BY id DESC LIMIT ?`, append(args, before, limit)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r, err := scan(rows.Scan)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	return out, wrap(err)
}

// ListRuns implements store.JobStore.
func (s *Store) ListRuns(ctx context.Context, p store.ListParams) ([]store.RunRecord, error) {
	return listNewest(s, ctx, p, `SELECT `+store.RunColumns+` FROM sluice_job_runs WHERE (? = '' OR job_id = ?)
AND (? = '' OR job_id IN (SELECT id FROM sluice_jobs WHERE connector_id = ?))`,
		[]any{p.JobID, p.JobID, p.ConnectorID, p.ConnectorID}, store.ScanRun)
}

// ListGaps implements store.JobStore.
func (s *Store) ListGaps(ctx context.Context, p store.ListParams) ([]store.GapRecord, error) {
	return listNewest(s, ctx, p, `SELECT `+store.GapColumns+` FROM sluice_job_gaps WHERE (? = '' OR job_id = ?)
AND (? = '' OR job_id IN (SELECT id FROM sluice_jobs WHERE connector_id = ?))`,
		[]any{p.JobID, p.JobID, p.ConnectorID, p.ConnectorID}, store.ScanGap)
}

// RecordBreakerTransition implements store.JobStore.
func (s *Store) RecordBreakerTransition(ctx context.Context, t store.BreakerTransition) (store.BreakerTransition, error) {
	if err := t.Check(); err != nil {
		return store.BreakerTransition{}, err
	}
	err := s.do(ctx, overrideOf(t.Now), func(tx *txn) error {
		mark(tx)
		t.At = store.FromMicros(tx.now)
		return wrap(tx.s.conn.QueryRowContext(tx.ctx, `INSERT INTO sluice_breaker_transitions (connector_id, key, from_state, to_state, reason, requests, failures, at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`, t.ConnectorID, t.Key, t.From, t.To, t.Reason, t.Requests, t.Failures, tx.now).Scan(&t.ID))
	})
	t.Now = time.Time{}
	return t, err
}

// ListBreakerTransitions implements store.JobStore.
func (s *Store) ListBreakerTransitions(ctx context.Context, p store.ListParams) ([]store.BreakerTransition, error) {
	return listNewest(s, ctx, p, `SELECT `+store.TransitionColumns+` FROM sluice_breaker_transitions WHERE (? = '' OR connector_id = ?)`,
		[]any{p.ConnectorID, p.ConnectorID}, store.ScanTransition)
}

// mark raises the file's clock high-water mark to this operation's time,
// as every write does, so that no process reads the store clock below it.
func mark(tx *txn) {
	tx.wrote = true
	if tx.override == 0 && tx.now > tx.b.clockAt {
		tx.b.clockAt, tx.b.clockSet = tx.now, true
	}
}

var _ store.JobFinisher = (*Store)(nil)

// FinishJobs implements store.JobFinisher: one transaction (one commit)
// that ends every run of ps whose token still holds its job, as FinishJob
// does one; the others are reported stale or missing and change nothing.
func (s *Store) FinishJobs(ctx context.Context, ps []store.EndParams) ([]error, error) {
	if err := store.CheckFinishes(ps); err != nil {
		return nil, err
	}
	errs := make([]error, len(ps))
	if len(ps) == 0 {
		return errs, nil
	}
	// The transaction runs at the finishes' common override, if they
	// share one; each finish's own override decides its times.
	override := overrideOf(ps[0].Now)
	for _, p := range ps {
		if overrideOf(p.Now) != override {
			override = 0
			break
		}
	}
	err := s.do(ctx, override, func(tx *txn) error {
		conn := tx.s.conn
		for i, p := range ps {
			errs[i] = held(tx, p.Fence)
			if errs[i] != nil {
				if errors.Is(errs[i], store.ErrStaleToken) || errors.Is(errs[i], store.ErrJobNotFound) {
					continue
				}
				return errs[i]
			}
			now := tx.now
			if o := overrideOf(p.Now); o != 0 {
				now = o
			}
			mark(tx)
			if _, err := conn.ExecContext(tx.ctx, `UPDATE sluice_job_runs SET ended_at = ?, outcome = ?, requests = ?, retries = ?, error = ?
WHERE job_id = ? AND token = ? AND outcome = 'running'`, now, store.RunSucceeded, p.Stats.Requests, p.Stats.Retries, p.Error, p.JobID, p.Token); err != nil {
				return wrap(err)
			}
			if _, err := conn.ExecContext(tx.ctx, `UPDATE sluice_jobs SET lease_holder = '', lease_until = 0, next_run_at = ?,
    last_success_at = ?, consecutive_failures = 0, parked_reason = '', parked_until = 0 WHERE id = ?`, now+p.Delay.Microseconds(), now, p.JobID); err != nil {
				return wrap(err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return errs, nil
}
