package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
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

func typesArg(types []string) string {
	if len(types) == 0 {
		return ""
	}
	b, _ := json.Marshal(types)
	return string(b)
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
