package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicerl/sluice/store"
)

// Jobs and runs (store.JobStore). Each operation is one READ COMMITTED
// transaction deciding at the database clock (sluice_rate_now(), or the
// params' Now). A claim locks its candidate rows FOR UPDATE SKIP LOCKED, so
// concurrent claimers never wait on each other and never share a job; every
// fenced write locks the job's row and checks the token first. A claim's
// gate is asked before its transaction, so no row lock is held while it
// runs.

var _ store.JobStore = (*Store)(nil)

// jobTx runs f in one transaction at the store time (or override).
func (s *Store) jobTx(ctx context.Context, op string, override time.Time, f func(tx pgx.Tx, now int64) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return wrap(op, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var now int64
	if err := tx.QueryRow(ctx, `SELECT coalesce($1::bigint, sluice_rate_now())`, nowArg(override)).Scan(&now); err != nil {
		return wrap(op, err)
	}
	if err := f(tx, now); err != nil {
		if errors.Is(err, store.ErrStaleToken) || errors.Is(err, store.ErrJobNotFound) || errors.Is(err, store.ErrConnectorNotFound) ||
			errors.Is(err, store.ErrInvalidJob) {
			return err
		}
		return wrap(op, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return wrap(op, err)
	}
	return nil
}

// UpsertConnector implements store.JobStore.
func (s *Store) UpsertConnector(ctx context.Context, c store.Connector) (store.Connector, bool, error) {
	if err := c.Check(); err != nil {
		return store.Connector{}, false, err
	}
	pol := c.Policies
	if pol == nil {
		pol = []string{}
	}
	b, err := json.Marshal(pol)
	if err != nil {
		return store.Connector{}, false, err
	}
	var out store.Connector
	var created bool
	err = s.jobTx(ctx, "upsert connector", time.Time{}, func(tx pgx.Tx, now int64) error {
		// xmax = 0 only for a row this statement inserted.
		if err := tx.QueryRow(ctx, `INSERT INTO sluice_job_connectors (id, status, policies, profile, created_at) VALUES ($1, coalesce(nullif($2, ''), 'active'), $3, $4, $5)
ON CONFLICT (id) DO UPDATE SET status = CASE WHEN $2 = '' THEN sluice_job_connectors.status ELSE excluded.status END, policies = excluded.policies, profile = excluded.profile
RETURNING xmax = 0`, c.ID, string(c.Status), string(b), c.Profile, now).Scan(&created); err != nil {
			return err
		}
		var err error
		out, err = store.ScanConnector(tx.QueryRow(ctx, `SELECT `+store.ConnectorColumns+` FROM sluice_job_connectors c WHERE c.id = $1`, c.ID).Scan)
		return err
	})
	return out, created, err
}

// GetConnector implements store.JobStore.
func (s *Store) GetConnector(ctx context.Context, id string) (store.Connector, error) {
	c, err := store.ScanConnector(s.pool.QueryRow(ctx, `SELECT `+store.ConnectorColumns+` FROM sluice_job_connectors c WHERE c.id = $1`, id).Scan)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Connector{}, store.ErrConnectorNotFound
	}
	if err != nil {
		return store.Connector{}, wrap("get connector", err)
	}
	return c, nil
}

func collect[T any](rows pgx.Rows, scan func(func(...any) error) (T, error)) ([]T, error) {
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows.Scan)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// ListConnectors implements store.JobStore.
func (s *Store) ListConnectors(ctx context.Context, p store.ListParams) ([]store.Connector, error) {
	limit, err := p.EffectiveLimit()
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+store.ConnectorColumns+` FROM sluice_job_connectors c WHERE c.id > $1 ORDER BY c.id LIMIT $2`, p.After, limit)
	if err != nil {
		return nil, wrap("list connectors", err)
	}
	out, err := collect(rows, store.ScanConnector)
	if err != nil {
		return nil, wrap("list connectors", err)
	}
	return out, nil
}

// SetConnectorStatus implements store.JobStore.
func (s *Store) SetConnectorStatus(ctx context.Context, id string, st store.ConnectorStatus) error {
	if err := store.CheckStatus(st); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE sluice_job_connectors SET status = $1 WHERE id = $2`, string(st), id)
	if err != nil {
		return wrap("set connector status", err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrConnectorNotFound
	}
	return nil
}

// UpsertJob implements store.JobStore.
func (s *Store) UpsertJob(ctx context.Context, spec store.JobSpec, now time.Time) (store.Job, bool, error) {
	if err := spec.Check(); err != nil {
		return store.Job{}, false, err
	}
	var out store.Job
	var created bool
	err := s.jobTx(ctx, "upsert job", now, func(tx pgx.Tx, now int64) error {
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM sluice_job_connectors WHERE id = $1`, spec.ConnectorID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return store.ErrConnectorNotFound
		}
		if err := tx.QueryRow(ctx, `INSERT INTO sluice_jobs (id, connector_id, type, params, disabled, priority, interval_us, group_key, next_run_at, cron, time_zone)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (id) DO UPDATE SET connector_id = excluded.connector_id, type = excluded.type, params = excluded.params,
    disabled = excluded.disabled, priority = excluded.priority, interval_us = excluded.interval_us, group_key = excluded.group_key,
    cron = excluded.cron, time_zone = excluded.time_zone
RETURNING xmax = 0`, spec.ID, spec.ConnectorID, spec.Type, spec.NormalParams(), spec.Disabled, spec.Priority, spec.Interval.Microseconds(),
			spec.Group(), now, spec.Cron, spec.TimeZone).Scan(&created); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO sluice_job_groups (group_key) VALUES ($1) ON CONFLICT DO NOTHING`, spec.Group()); err != nil {
			return err
		}
		var err error
		out, err = store.ScanJob(tx.QueryRow(ctx, `SELECT `+store.JobColumns+` FROM sluice_jobs WHERE id = $1`, spec.ID).Scan)
		return err
	})
	return out, created, err
}

// GetJob implements store.JobStore.
func (s *Store) GetJob(ctx context.Context, id string) (store.Job, error) {
	j, err := store.ScanJob(s.pool.QueryRow(ctx, `SELECT `+store.JobColumns+` FROM sluice_jobs WHERE id = $1`, id).Scan)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Job{}, store.ErrJobNotFound
	}
	if err != nil {
		return store.Job{}, wrap("get job", err)
	}
	return j, nil
}

// ListJobs implements store.JobStore.
func (s *Store) ListJobs(ctx context.Context, p store.ListParams) ([]store.Job, error) {
	limit, err := p.EffectiveLimit()
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+store.JobColumns+` FROM sluice_jobs
WHERE id > $1 AND ($2 = '' OR connector_id = $2) AND ($3 = '' OR group_key = $3) ORDER BY id LIMIT $4`, p.After, p.ConnectorID, p.GroupKey, limit)
	if err != nil {
		return nil, wrap("list jobs", err)
	}
	out, err := collect(rows, store.ScanJob)
	if err != nil {
		return nil, wrap("list jobs", err)
	}
	return out, nil
}

// TriggerJob implements store.JobStore.
func (s *Store) TriggerJob(ctx context.Context, id string, now time.Time) error {
	tag, err := s.pool.Exec(ctx, `UPDATE sluice_jobs SET next_run_at = coalesce($1::bigint, sluice_rate_now()), parked_reason = '', parked_until = 0
WHERE id = $2`, nowArg(now), id)
	if err != nil {
		return wrap("trigger job", err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrJobNotFound
	}
	return nil
}

// pgDueSQL is the condition of a claimable job j of connector c: $1 is
// now, $2 the types (empty: any).
const pgDueSQL = `NOT j.disabled AND j.next_run_at <= $1 AND (j.lease_holder = '' OR j.lease_until <= $1)
AND c.status = 'active' AND c.pressure_until <= $1 AND (cardinality($2::text[]) = 0 OR j.type = ANY($2))`

// ClaimJobs implements store.JobStore. Its cost is O(groups) index probes
// plus the heads it reads, not O(due jobs): the groups table lists the
// groups, one probe each says whether it has a claimable job and counts its
// load, and a lateral read locks only the heads of the groups the fair
// order takes from (FOR UPDATE SKIP LOCKED, so rows other claims hold are
// passed over before the limit counts them).
//
// It takes three round trips: one read (the store time, the groups and
// their loads, and for the gate the connectors with due jobs and those of
// the jobs ClaimAndFinish finishes), the gate's,
// then the transaction as one batch: BEGIN, the finishes of
// ClaimAndFinish, the gate's deferrals, one claim statement (the heads'
// locking reads and the fair pick in sluice_job_pick, the leases, the runs
// and the connectors' rows) and COMMIT. The groups and loads are read
// before the transaction: they order the groups and never decide which
// rows are taken, and no row lock is held while the gate runs. Whether a
// group or connector has a due job is a lateral probe with LIMIT 1, one
// index probe each: an EXISTS there is planned as a hash semi-join over
// every job, O(due jobs) per claim.
func (s *Store) ClaimJobs(ctx context.Context, p store.ClaimParams) ([]store.Claim, error) {
	out, _, err := s.claim(ctx, p, nil)
	return out, err
}

// ClaimAndFinish implements store.ClaimFinisher: the finishes go out in
// the claim's first batch, right after BEGIN, and commit with it.
func (s *Store) ClaimAndFinish(ctx context.Context, p store.ClaimParams, fin []store.EndParams) ([]store.Claim, []error, error) {
	if err := store.CheckFinishes(fin); err != nil {
		return nil, nil, err
	}
	return s.claim(ctx, p, fin)
}

func (s *Store) claim(ctx context.Context, p store.ClaimParams, fin []store.EndParams) ([]store.Claim, []error, error) {
	if err := p.Check(); err != nil {
		return nil, nil, err
	}
	types := p.Types
	if types == nil {
		types = []string{}
	}
	due := strings.ReplaceAll(pgDueSQL, "$1", "n.now")
	rows, err := s.pool.Query(ctx, `WITH n AS (SELECT coalesce($1::bigint, sluice_rate_now()) AS now)
SELECT 'g', g.group_key, g.weight,
    (SELECT count(*) FROM sluice_jobs h WHERE h.group_key = g.group_key AND h.lease_holder <> '' AND h.lease_until > n.now),
    coalesce((SELECT m.claim_seq FROM sluice_jobs m WHERE m.group_key = g.group_key ORDER BY m.claim_seq DESC OFFSET g.weight - 1 LIMIT 1), 0),
    n.now
FROM n CROSS JOIN sluice_job_groups g
CROSS JOIN LATERAL (
    SELECT 1 FROM sluice_jobs j JOIN sluice_job_connectors c ON c.id = j.connector_id
    WHERE j.group_key = g.group_key AND `+due+` ORDER BY j.next_run_at LIMIT 1) d
UNION ALL
SELECT 'c', c.id, 0, 0, 0, n.now FROM n CROSS JOIN sluice_job_connectors c
CROSS JOIN LATERAL (
    SELECT 1 FROM sluice_jobs j WHERE j.connector_id = c.id AND `+due+` ORDER BY j.next_run_at LIMIT 1) d
WHERE $3 AND c.status = 'active' AND c.pressure_until <= n.now
UNION ALL
SELECT 'c', c.id, 0, 0, 0, n.now FROM n CROSS JOIN sluice_job_connectors c
WHERE $3 AND c.status = 'active' AND c.pressure_until <= n.now
    AND c.id IN (SELECT f.connector_id FROM sluice_jobs f WHERE f.id = ANY($4::text[]))
UNION ALL
SELECT 'n', '', 0, 0, 0, n.now FROM n`, nowArg(p.Now), types, p.Gate != nil, finishedIDs(p.Gate, fin))
	if err != nil {
		return nil, nil, wrap("claim", err)
	}
	var now int64
	loads := map[string]store.GroupLoad{}
	var keys, conns []string
	for rows.Next() {
		var kind, key string
		var l store.GroupLoad
		if err := rows.Scan(&kind, &key, &l.Weight, &l.Running, &l.LastClaim, &now); err != nil {
			rows.Close()
			return nil, nil, wrap("claim", err)
		}
		switch kind {
		case "g":
			loads[key] = l
			keys = append(keys, key)
		case "c":
			conns = append(conns, key)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, wrap("claim", err)
	}
	slices.Sort(conns)
	conns = slices.Compact(conns)
	var waits map[string]time.Duration
	if p.Gate != nil {
		if waits, err = store.AskGate(ctx, p.Gate, conns); err != nil {
			return nil, nil, err
		}
	}
	if len(keys) == 0 && len(waits) == 0 && len(fin) == 0 {
		return nil, nil, nil // nothing is due, nothing to write
	}
	store.OrderGroups(keys, loads)

	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, wrap("claim", err)
	}
	defer conn.Release()
	c := conn.Conn()
	committed := false
	defer func() {
		if !committed && c.PgConn().TxStatus() != 'I' {
			// A connection left in a transaction is closed by the
			// pool on release; a rollback keeps it.
			if _, err := c.Exec(context.WithoutCancel(ctx), `ROLLBACK`); err != nil {
				_ = c.Close(context.WithoutCancel(ctx))
			}
		}
	}()
	out, errs, err := s.claimTx(ctx, c, p, now, types, keys, loads, waits, fin)
	if err != nil {
		return nil, nil, wrap("claim", err)
	}
	committed = true
	return out, errs, nil
}

// finishedIDs returns the ids of the jobs fin finishes when a gate is to
// be asked: a finish may make its job due at once, inside the claim's
// transaction, so the gate is asked about their connectors too (with those
// with due jobs), and the gate's deferrals, after the finishes, move the
// finished jobs of a connector without capacity as well.
func finishedIDs(gate store.Gate, fin []store.EndParams) []string {
	ids := []string{}
	if gate == nil {
		return ids
	}
	for _, f := range fin {
		ids = append(ids, f.Fence.JobID)
	}
	return ids
}

// claimTx is ClaimJobs' transaction on c, at now, in one round trip: one
// batch of BEGIN, the finishes, the gate's deferrals, the claim statement
// and COMMIT. The claim statement picks the jobs (sluice_job_pick: the
// heads of the groups in fair order, locked FOR UPDATE SKIP LOCKED, picked
// as store.PickClaims picks), ends the runs expired leases left open,
// leases the picks with claim_seq in pick order, opens their runs
// (one multi-row INSERT) and reads their connectors.
func (s *Store) claimTx(ctx context.Context, c *pgx.Conn, p store.ClaimParams, now int64, types, keys []string,
	loads map[string]store.GroupLoad, waits map[string]time.Duration, fin []store.EndParams) ([]store.Claim, []error, error) {
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	if len(fin) > 0 {
		b.Queue(finishSQL, finishArgs(fin)...)
	}
	ids := make([]string, 0, len(waits))
	for id := range waits {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		b.Queue(`UPDATE sluice_jobs j SET next_run_at = greatest(j.next_run_at, $3)
FROM sluice_job_connectors c WHERE c.id = j.connector_id AND j.connector_id = $4 AND `+pgDueSQL, now, types, now+waits[id].Microseconds(), id)
	}
	until := now + p.LeaseTTL.Microseconds()
	if len(keys) > 0 {
		weights := make([]int64, len(keys))
		for i, k := range keys {
			weights[i] = loads[k].Weight
		}
		b.Queue(`WITH p AS MATERIALIZED (
    SELECT x.pid, x.ord, nextval('sluice_job_claim_seq') AS seq
    FROM (SELECT * FROM sluice_job_pick($1, $4, $5, $6, $7) ORDER BY ord) x),
a AS (
    UPDATE sluice_job_runs SET outcome = 'abandoned', ended_at = $1
    FROM p, sluice_jobs o
    WHERE o.id = p.pid AND o.lease_holder <> '' AND sluice_job_runs.job_id = p.pid AND sluice_job_runs.outcome = 'running'
        AND sluice_job_runs.token = o.lease_token),
j AS (
    UPDATE sluice_jobs SET lease_holder = $2, lease_token = lease_token + 1, lease_until = $3,
        claim_seq = p.seq, runs = runs + 1, last_run_at = $1
    FROM p WHERE sluice_jobs.id = p.pid RETURNING `+store.JobColumns+`, p.ord),
r AS (
    INSERT INTO sluice_job_runs (job_id, token, holder, started_at) SELECT id, lease_token, $2, $1 FROM j ORDER BY ord RETURNING id, job_id)
SELECT j.*, r.id, `+store.ConnectorRowColumns+` FROM j JOIN r ON r.job_id = j.id JOIN sluice_job_connectors c ON c.id = j.connector_id
ORDER BY j.ord`, now, p.Holder, until, types, keys, weights, int32(p.Limit))
	}
	b.Queue(`COMMIT`)
	br := c.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, nil, err
	}
	var errs []error
	if len(fin) > 0 {
		rows, err := br.Query()
		if err == nil {
			errs, err = finishResults(rows, fin)
		}
		if err != nil {
			return nil, nil, err
		}
	}
	for range ids {
		if _, err := br.Exec(); err != nil {
			return nil, nil, err
		}
	}
	var out []store.Claim
	at := store.FromMicros(now)
	if len(keys) > 0 {
		rows, err := br.Query()
		if err != nil {
			return nil, nil, fmt.Errorf("claiming jobs: %w", err)
		}
		for rows.Next() {
			var ord, runID int64
			var conn store.Connector
			j, err := store.ScanJob(func(d ...any) error {
				var cerr error
				conn, cerr = store.ScanConnector(func(cd ...any) error {
					return rows.Scan(append(append(d, &ord, &runID), cd...)...)
				})
				return cerr
			})
			if err != nil {
				rows.Close()
				return nil, nil, fmt.Errorf("claiming jobs: %w", err)
			}
			out = append(out, store.Claim{Job: j, RunID: runID, At: at, Connector: conn})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, nil, fmt.Errorf("claiming jobs: %w", err)
		}
	}
	if _, err := br.Exec(); err != nil {
		return nil, nil, fmt.Errorf("commit: %w", err)
	}
	if err := br.Close(); err != nil {
		return nil, nil, err
	}
	if c.PgConn().TxStatus() != 'I' {
		return nil, nil, errors.New("commit: the transaction is still open")
	}
	return out, errs, nil
}

// SetGroupWeight implements store.JobStore.
func (s *Store) SetGroupWeight(ctx context.Context, group string, weight int) error {
	if err := store.CheckGroupWeight(group, weight); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO sluice_job_groups (group_key, weight) VALUES ($1, $2)
ON CONFLICT (group_key) DO UPDATE SET weight = excluded.weight`, group, weight); err != nil {
		return wrap("set group weight", err)
	}
	return nil
}

// GroupWeight implements store.JobStore.
func (s *Store) GroupWeight(ctx context.Context, group string) (int, error) {
	var w int
	err := s.pool.QueryRow(ctx, `SELECT coalesce((SELECT weight FROM sluice_job_groups WHERE group_key = $1), 1)`, group).Scan(&w)
	if err != nil {
		return 0, wrap("group weight", err)
	}
	return w, nil
}

// notHeld tells why a fenced write matched no row: ErrJobNotFound, or
// ErrStaleToken when the job exists but the token does not hold it.
func (s *Store) notHeld(ctx context.Context, op, id string) error {
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM sluice_jobs WHERE id = $1)`, id).Scan(&exists); err != nil {
		return wrap(op, err)
	}
	if !exists {
		return store.ErrJobNotFound
	}
	return store.ErrStaleToken
}

// Heartbeat implements store.JobStore: one statement, fenced by its
// WHERE.
func (s *Store) Heartbeat(ctx context.Context, p store.HeartbeatParams) (time.Time, error) {
	if err := store.CheckHeartbeat(&p); err != nil {
		return time.Time{}, err
	}
	var until int64
	err := s.pool.QueryRow(ctx, `UPDATE sluice_jobs SET lease_until = coalesce($1::bigint, sluice_rate_now()) + $2
WHERE id = $3 AND lease_token = $4 AND lease_holder <> '' RETURNING lease_until`,
		nowArg(p.Now), p.LeaseTTL.Microseconds(), p.JobID, p.Token).Scan(&until)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, s.notHeld(ctx, "heartbeat", p.JobID)
	}
	if err != nil {
		return time.Time{}, wrap("heartbeat", err)
	}
	return store.FromMicros(until), nil
}

// CommitCursor implements store.JobStore: one statement; the run's slice
// is counted only if the job's row was moved.
func (s *Store) CommitCursor(ctx context.Context, p store.CommitParams) error {
	if err := store.CheckCommit(&p); err != nil {
		return err
	}
	col := "cursor"
	if p.CatchUp {
		col = "catch_up_cursor"
	}
	var held int
	err := s.pool.QueryRow(ctx, `WITH j AS (
    UPDATE sluice_jobs SET `+col+` = $1 WHERE id = $2 AND lease_token = $3 AND lease_holder <> '' RETURNING id),
r AS (
    UPDATE sluice_job_runs SET slices = slices + 1 WHERE job_id = $2 AND token = $3 AND EXISTS (SELECT 1 FROM j))
SELECT count(*) FROM j`, p.Cursor, p.JobID, p.Token).Scan(&held)
	if err != nil {
		return wrap("commit cursor", err)
	}
	if held == 1 {
		return nil
	}
	return s.notHeld(ctx, "commit cursor", p.JobID)
}

// end ends a held job's run with outcome op in one statement (one round
// trip, its own transaction): the job's row is updated only while the
// fence's token holds it, the run's row only if the job's was, and extra
// (a data-modifying WITH item, or empty) may follow them. In set and
// extra, n.now is the store time, $1 the delay in microseconds, $2 the job
// id, $3 the token; set's and extra's own parameters start at $8.
func (s *Store) end(ctx context.Context, op string, p store.EndParams, set, extra string, args ...any) error {
	if err := store.CheckEnd(op, &p); err != nil {
		return err
	}
	a := append([]any{p.Delay.Microseconds(), p.JobID, p.Token, op, p.Stats.Requests, p.Stats.Retries, p.Error}, args...)
	a = append(a, nowArg(p.Now))
	nowParam := fmt.Sprintf("$%d", len(a))
	var held int
	err := s.pool.QueryRow(ctx, `WITH n AS (SELECT coalesce(`+nowParam+`::bigint, sluice_rate_now()) AS now),
j AS (
    UPDATE sluice_jobs SET lease_holder = '', lease_until = 0, next_run_at = (SELECT now FROM n) + $1`+set+`
    FROM n WHERE id = $2 AND lease_token = $3 AND lease_holder <> ''
    RETURNING sluice_jobs.id, sluice_jobs.connector_id, sluice_jobs.cursor, sluice_jobs.catch_up_cursor),
r AS (
    UPDATE sluice_job_runs SET ended_at = (SELECT now FROM n), outcome = $4, requests = $5, retries = $6, error = $7
    WHERE job_id = $2 AND token = $3 AND outcome = 'running' AND EXISTS (SELECT 1 FROM j)
    RETURNING id)`+extra+`
SELECT count(*) FROM j`, a...).Scan(&held)
	if err != nil {
		return wrap(op, err)
	}
	if held == 1 {
		return nil
	}
	return s.notHeld(ctx, op, p.JobID)
}

// FinishJob implements store.JobStore.
func (s *Store) FinishJob(ctx context.Context, p store.EndParams) error {
	return s.end(ctx, store.RunSucceeded, p, `, last_success_at = n.now, consecutive_failures = 0, parked_reason = '', parked_until = 0`, ``)
}

// FailJob implements store.JobStore.
func (s *Store) FailJob(ctx context.Context, p store.EndParams) error {
	return s.end(ctx, store.RunFailed, p, `, failures = failures + 1, consecutive_failures = consecutive_failures + 1, last_error = $8,
    disabled = (disabled OR $9)`, ``, store.CutError(p.Error), p.Permanent)
}

// ParkJob implements store.JobStore.
func (s *Store) ParkJob(ctx context.Context, p store.EndParams) error {
	return s.end(ctx, store.RunParked, p, `, parked_reason = $8, parked_until = n.now + $1`, `,
c AS (
    UPDATE sluice_job_connectors SET pressure_until = greatest(pressure_until, (SELECT now FROM n) + $1)
    WHERE id = (SELECT connector_id FROM j))`, p.Reason)
}

// DeferJob implements store.JobStore.
func (s *Store) DeferJob(ctx context.Context, p store.EndParams) error {
	col := "cursor"
	if p.CatchUp {
		col = "catch_up_cursor"
	}
	return s.end(ctx, store.RunDeferred, p, ``, `,
g AS (
    INSERT INTO sluice_job_gaps (job_id, run_id, catch_up, cursor, reason, created_at)
    SELECT j.id, coalesce((SELECT id FROM r), 0), $8, j.`+col+`, $9, (SELECT now FROM n) FROM j)`, p.CatchUp, p.Reason)
}

// ReleaseJob implements store.JobStore.
func (s *Store) ReleaseJob(ctx context.Context, p store.EndParams) error {
	p.Delay = 0
	return s.end(ctx, store.RunReleased, p, ``, ``)
}

func listNewestPG[T any](ctx context.Context, s *Store, op string, p store.ListParams, q string, args []any, scan func(func(...any) error) (T, error)) ([]T, error) {
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
	args = append(args, before, limit)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, wrap(op, err)
	}
	out, err := collect(rows, scan)
	if err != nil {
		return nil, wrap(op, err)
	}
	return out, nil
}

// ListRuns implements store.JobStore.
func (s *Store) ListRuns(ctx context.Context, p store.ListParams) ([]store.RunRecord, error) {
	return listNewestPG(ctx, s, "list runs", p, `SELECT `+store.RunColumns+` FROM sluice_job_runs WHERE ($1 = '' OR job_id = $1)
AND ($2 = '' OR job_id IN (SELECT id FROM sluice_jobs WHERE connector_id = $2)) AND id < $3 ORDER BY id DESC LIMIT $4`,
		[]any{p.JobID, p.ConnectorID}, store.ScanRun)
}

// ListGaps implements store.JobStore.
func (s *Store) ListGaps(ctx context.Context, p store.ListParams) ([]store.GapRecord, error) {
	return listNewestPG(ctx, s, "list gaps", p, `SELECT `+store.GapColumns+` FROM sluice_job_gaps WHERE ($1 = '' OR job_id = $1)
AND ($2 = '' OR job_id IN (SELECT id FROM sluice_jobs WHERE connector_id = $2)) AND id < $3 ORDER BY id DESC LIMIT $4`,
		[]any{p.JobID, p.ConnectorID}, store.ScanGap)
}

// RecordBreakerTransition implements store.JobStore.
func (s *Store) RecordBreakerTransition(ctx context.Context, t store.BreakerTransition) (store.BreakerTransition, error) {
	if err := t.Check(); err != nil {
		return store.BreakerTransition{}, err
	}
	var at int64
	err := s.pool.QueryRow(ctx, `INSERT INTO sluice_breaker_transitions (connector_id, key, from_state, to_state, reason, requests, failures, at)
VALUES ($1, $2, $3, $4, $5, $6, $7, coalesce($8::bigint, sluice_rate_now())) RETURNING id, at`,
		t.ConnectorID, t.Key, t.From, t.To, t.Reason, t.Requests, t.Failures, nowArg(t.Now)).Scan(&t.ID, &at)
	if err != nil {
		return store.BreakerTransition{}, wrap("record breaker transition", err)
	}
	t.At, t.Now = store.FromMicros(at), time.Time{}
	return t, nil
}

// ListBreakerTransitions implements store.JobStore.
func (s *Store) ListBreakerTransitions(ctx context.Context, p store.ListParams) ([]store.BreakerTransition, error) {
	return listNewestPG(ctx, s, "list breaker transitions", p, `SELECT `+store.TransitionColumns+` FROM sluice_breaker_transitions
WHERE ($1 = '' OR connector_id = $1) AND id < $2 ORDER BY id DESC LIMIT $3`, []any{p.ConnectorID}, store.ScanTransition)
}

var (
	_ store.JobFinisher   = (*Store)(nil)
	_ store.ClaimFinisher = (*Store)(nil)
)

// finishSQL ends a batch of runs as successes (finishArgs), each fenced on
// its own; it returns one row per entry: id, token, finished, exists. Rows
// are locked in id order, so that two batches never wait on each other in
// a cycle. An entry's now 0 means the store time.
const finishSQL = `WITH n AS (SELECT sluice_rate_now() AS now),
p AS (
    SELECT x.id, x.token, x.delay, x.requests, x.retries, x.error, CASE WHEN x.now = 0 THEN n.now ELSE x.now END AS now
    FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::text[], $7::bigint[])
        AS x(id, token, delay, requests, retries, error, now), n),
l AS (
    SELECT j.id FROM sluice_jobs j JOIN p ON p.id = j.id AND p.token = j.lease_token
    WHERE j.lease_holder <> '' ORDER BY j.id FOR UPDATE OF j),
j AS (
    UPDATE sluice_jobs SET lease_holder = '', lease_until = 0, next_run_at = p.now + p.delay, last_success_at = p.now,
        consecutive_failures = 0, parked_reason = '', parked_until = 0
    FROM p WHERE sluice_jobs.id = p.id AND sluice_jobs.lease_token = p.token AND sluice_jobs.lease_holder <> ''
        AND sluice_jobs.id IN (SELECT id FROM l)
    RETURNING sluice_jobs.id, p.token),
r AS (
    UPDATE sluice_job_runs SET ended_at = p.now, outcome = 'succeeded', requests = p.requests, retries = p.retries, error = p.error
    FROM p WHERE sluice_job_runs.job_id = p.id AND sluice_job_runs.token = p.token AND sluice_job_runs.outcome = 'running'
        AND EXISTS (SELECT 1 FROM j WHERE j.id = p.id AND j.token = p.token))
SELECT p.id, p.token, j.id IS NOT NULL, EXISTS (SELECT 1 FROM sluice_jobs x WHERE x.id = p.id)
FROM p LEFT JOIN j ON j.id = p.id AND j.token = p.token`

func finishArgs(ps []store.EndParams) []any {
	n := len(ps)
	ids, errMsgs := make([]string, n), make([]string, n)
	tokens, delays, reqs, retries, nows := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for i, p := range ps {
		ids[i], tokens[i], delays[i], reqs[i], retries[i], errMsgs[i] = p.JobID, p.Token, p.Delay.Microseconds(), p.Stats.Requests, p.Stats.Retries, p.Error
		nows[i] = store.NowMicros(p.Now)
	}
	return []any{ids, tokens, delays, reqs, retries, errMsgs, nows}
}

// finishResults reads finishSQL's rows into one error per entry of ps.
func finishResults(rows pgx.Rows, ps []store.EndParams) ([]error, error) {
	defer rows.Close()
	type key struct {
		id    string
		token int64
	}
	got := map[key]error{}
	for rows.Next() {
		var k key
		var done, exists bool
		if err := rows.Scan(&k.id, &k.token, &done, &exists); err != nil {
			return nil, err
		}
		switch {
		case done:
			got[k] = nil
		case exists:
			got[k] = store.ErrStaleToken
		default:
			got[k] = store.ErrJobNotFound
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	errs := make([]error, len(ps))
	for i, p := range ps {
		e, ok := got[key{p.JobID, p.Token}]
		if !ok {
			e = store.ErrStaleToken
		}
		errs[i] = e
	}
	return errs, nil
}

// FinishJobs implements store.JobFinisher: one statement (one round trip,
// one commit) that ends every run of ps whose token still holds its job,
// as FinishJob does one; the others are reported stale or missing.
func (s *Store) FinishJobs(ctx context.Context, ps []store.EndParams) ([]error, error) {
	if err := store.CheckFinishes(ps); err != nil {
		return nil, err
	}
	if len(ps) == 0 {
		return []error{}, nil
	}
	rows, err := s.pool.Query(ctx, finishSQL, finishArgs(ps)...)
	if err != nil {
		return nil, wrap("finish jobs", err)
	}
	errs, err := finishResults(rows, ps)
	if err != nil {
		return nil, wrap("finish jobs", err)
	}
	return errs, nil
}
