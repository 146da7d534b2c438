package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicerl/sluice/store"
)

// The claim and the batched finishes, set-based: SQLite has one writer and
// modernc.org/sqlite runs every statement in Go, so what a claim costs is
// its transactions (one commit, one fsync) and its statements. A claim of n
// jobs runs a fixed number of prepared statements (the groups and their
// loads, the heads of the groups it takes from, then one statement each to
// close abandoned runs, lease the picks, open their runs and read their
// connectors), not three per job; a batch of finishes runs two, whatever
// its size; and ClaimAndFinish writes a worker's finishes in its next
// claim's transaction, so that the two share one commit.

var (
	_ store.JobFinisher   = (*Store)(nil)
	_ store.ClaimFinisher = (*Store)(nil)
)

// jobQuery names a job statement, prepared once per store (Store.jobStmts).
type jobQuery int

const (
	qConnectors jobQuery = iota
	qDefer
	qGroups
	qWeighted
	qAbandon
	qLease
	qRuns
	qFinishHeld
	qFinishRuns
	qFinishJobs
	qHeads // qHeads + m - 1 reads the heads of m groups (headsSQL)
	qCount = qHeads + maxHeadGroups
)

// sql is q's text.
func (q jobQuery) sql() string {
	switch q {
	case qConnectors:
		return claimConnectorsSQL
	case qDefer:
		return claimDeferSQL
	case qGroups:
		return claimGroupsSQL
	case qWeighted:
		return claimWeightedSQL
	case qAbandon:
		return claimAbandonSQL
	case qLease:
		return claimLeaseSQL
	case qRuns:
		return claimRunsSQL
	case qFinishHeld:
		return finishHeldSQL
	case qFinishRuns:
		return finishRunsSQL
	case qFinishJobs:
		return finishJobsSQL
	}
	return headsSQL(int(q-qHeads) + 1)
}

// jobStmt returns q prepared on the store's connection, once. The store's
// mu is held (a transaction or a read is running).
func (s *Store) jobStmt(ctx context.Context, q jobQuery) (*sql.Stmt, error) {
	if s.jobStmts == nil {
		s.jobStmts = make([]*sql.Stmt, qCount)
	}
	if st := s.jobStmts[q]; st != nil {
		return st, nil
	}
	st, err := s.conn.PrepareContext(ctx, q.sql())
	if err != nil {
		return nil, wrap(err)
	}
	s.jobStmts[q] = st
	return st, nil
}

// query runs a prepared query in tx.
func (tx *txn) query(q jobQuery, args ...any) (*sql.Rows, error) {
	st, err := tx.s.jobStmt(tx.ctx, q)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(tx.ctx, args...)
	return rows, wrap(err)
}

// dueN is the condition of a claimable job j of connector c, with numbered
// parameters: ?1 is now, ?2 the types (typesArg).
const dueN = `j.disabled = 0 AND j.next_run_at <= ?1 AND (j.lease_holder = '' OR j.lease_until <= ?1)
AND c.status = 'active' AND c.pressure_until <= ?1 AND (?2 = '' OR j.type IN (SELECT value FROM json_each(?2)))`

// dueAtN is dueN at n.t (claimConnectorsSQL's store time) rather than ?1.
var dueAtN = strings.ReplaceAll(dueN, "?1", "n.t")

// The claim's statements.
var (
	// claimConnectorsSQL: for the gate, the connectors with a claimable job
	// at the store time (?1 if ?3, an override; else ?1, the process
	// clock, clamped to the file's high-water mark), and those of the
	// jobs ?4 (a JSON array of ids) that the claim's finishes may make
	// due.
	claimConnectorsSQL = `WITH n AS (SELECT CASE WHEN ?3 THEN ?1 ELSE max(?1, at) END AS t FROM sluice_clock WHERE id = 1)
SELECT c.id FROM n JOIN sluice_job_connectors c ON c.status = 'active' AND c.pressure_until <= n.t
WHERE EXISTS (SELECT 1 FROM sluice_jobs j WHERE j.connector_id = c.id AND ` + dueAtN + `)
OR c.id IN (SELECT f.connector_id FROM json_each(?4) AS x JOIN sluice_jobs f ON f.id = x.value)
ORDER BY 1`
	// claimDeferSQL moves the claimable jobs of connector ?3 to ?4 at
	// the earliest (the gate said it has no capacity before).
	claimDeferSQL = `UPDATE OR FAIL sluice_jobs SET next_run_at = max(next_run_at, ?4)
WHERE id IN (SELECT j.id FROM sluice_jobs j CROSS JOIN sluice_job_connectors c ON c.id = j.connector_id
    WHERE j.connector_id = ?3 AND ` + dueN + `)`
	// claimGroupsSQL: the groups with a claimable job, their weights,
	// running jobs and latest claims, and the latest claim of all (the
	// same on every row).
	claimGroupsSQL = `SELECT g.group_key, g.weight,
    (SELECT count(*) FROM sluice_jobs h WHERE h.group_key = g.group_key AND h.lease_holder <> '' AND h.lease_until > ?1),
    coalesce((SELECT max(m.claim_seq) FROM sluice_jobs m WHERE m.group_key = g.group_key), 0),
    coalesce((SELECT max(a.claim_seq) FROM sluice_jobs a), 0)
FROM sluice_job_groups g
WHERE EXISTS (SELECT 1 FROM sluice_jobs j CROSS JOIN sluice_job_connectors c ON c.id = j.connector_id
    WHERE j.group_key = g.group_key AND ` + dueN + `)`
	// claimWeightedSQL: group ?1's ?2-th most recent claim (SQLite takes
	// no column in OFFSET).
	claimWeightedSQL = `SELECT coalesce((SELECT claim_seq FROM sluice_jobs WHERE group_key = ?1
ORDER BY claim_seq DESC LIMIT 1 OFFSET ?2 - 1), 0)`
	// claimHeadSQL: the first ?K claimable jobs of group ?G (numbered by
	// headsSQL), in claim order, each with its connector's row
	// (store.ConnectorRowColumns first) and whether its lease expired
	// (someone held it). It walks sluice_jobs_group_order, which is in
	// that order, and stops after ?K rows: left to itself, the planner
	// reads every due job of the group by sluice_jobs_group_due and sorts
	// them, O(due jobs) per claim.
	claimHeadSQL = `SELECT * FROM (SELECT ` + store.ConnectorRowColumns + `, j.id, j.group_key, j.priority, j.next_run_at, j.lease_holder <> ''
FROM sluice_jobs j INDEXED BY sluice_jobs_group_order CROSS JOIN sluice_job_connectors c ON c.id = j.connector_id
WHERE j.group_key = ?G AND ` + dueN + `
ORDER BY j.priority DESC, j.next_run_at, j.id LIMIT ?K)`
	// claimAbandonSQL closes the running runs of the picks whose lease
	// expired (?2, a JSON array of ids): taken over, they are abandoned.
	claimAbandonSQL = `UPDATE OR FAIL sluice_job_runs SET outcome = 'abandoned', ended_at = ?1
WHERE job_id IN (SELECT value FROM json_each(?2)) AND outcome = 'running'
AND token = (SELECT j.lease_token FROM sluice_jobs j WHERE j.id = sluice_job_runs.job_id AND +j.lease_holder <> '')`
	// claimLeaseSQL leases the picks (?5, a JSON array of ids in pick
	// order): the k-th gets claim sequence ?3 + k + 1 and a new token.
	claimLeaseSQL = `UPDATE OR FAIL sluice_jobs SET lease_holder = ?1, lease_token = lease_token + 1, lease_until = ?2,
    claim_seq = ?3 + x.k + 1, runs = runs + 1, last_run_at = ?4
FROM (SELECT key AS k, value AS v FROM json_each(?5)) AS x WHERE sluice_jobs.id = x.v
RETURNING claim_seq, ` + store.JobColumns
	// claimRunsSQL opens a run for each pick (?3, a JSON array of [job
	// id, token] in pick order).
	claimRunsSQL = `INSERT OR FAIL INTO sluice_job_runs (job_id, token, holder, started_at)
SELECT value->>0, value->>1, ?1, ?2 FROM json_each(?3) ORDER BY key
RETURNING id, job_id`
)

// maxHeadGroups bounds the groups one heads read takes (SQLite compounds at
// most 500 SELECTs).
const maxHeadGroups = 32

// headsSQL reads the heads of m groups in one statement: claimHeadSQL once
// per group, the k-th with group ?(3+2k) and limit ?(4+2k).
func headsSQL(m int) string {
	var b strings.Builder
	for k := range m {
		if k > 0 {
			b.WriteString("\nUNION ALL\n")
		}
		r := strings.NewReplacer("?G", "?"+strconv.Itoa(3+2*k), "?K", "?"+strconv.Itoa(4+2*k))
		b.WriteString(r.Replace(claimHeadSQL))
	}
	return b.String()
}

// ClaimJobs implements store.JobStore.
func (s *Store) ClaimJobs(ctx context.Context, p store.ClaimParams) ([]store.Claim, error) {
	out, _, err := s.claim(ctx, p, nil)
	return out, err
}

// ClaimAndFinish implements store.ClaimFinisher: fin is written first, as
// FinishJobs writes it, then the claim runs, in one transaction.
func (s *Store) ClaimAndFinish(ctx context.Context, p store.ClaimParams, fin []store.EndParams) ([]store.Claim, []error, error) {
	if err := store.CheckFinishes(fin); err != nil {
		return nil, nil, err
	}
	return s.claim(ctx, p, fin)
}

// claim asks p's gate about the connectors with claimable jobs, then, in
// one transaction, writes fin, defers the gated connectors' jobs and
// claims.
func (s *Store) claim(ctx context.Context, p store.ClaimParams, fin []store.EndParams) ([]store.Claim, []error, error) {
	if err := p.Check(); err != nil {
		return nil, nil, err
	}
	types := typesArg(p.Types)
	// The gate is asked before the transaction (it may call this store)
	// about the connectors with claimable jobs and those of fin's jobs,
	// which the finishes may make due. In the transaction, only jobs of
	// the connectors it allowed are claimed: a job that became claimable
	// in between (another process's write, or time passing) waits for the
	// next claim rather than go unchecked.
	var waits map[string]time.Duration
	var asked map[string]bool
	if p.Gate != nil {
		conns, err := s.gateConnectors(ctx, p.Now, types, fin)
		if err != nil {
			return nil, nil, err
		}
		if waits, err = store.AskGate(ctx, p.Gate, conns); err != nil {
			return nil, nil, err
		}
		asked = make(map[string]bool, len(conns))
		for _, c := range conns {
			asked[c] = waits[c] == 0
		}
	}
	var out []store.Claim
	var errs []error
	err := s.do(ctx, overrideOf(p.Now), func(tx *txn) error {
		out, errs = nil, make([]error, len(fin))
		if len(fin) > 0 {
			if err := tx.finishes(fin, errs); err != nil {
				return err
			}
		}
		if err := tx.deferGated(waits, types); err != nil {
			return err
		}
		var err error
		out, err = tx.claim(p, types, asked)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return out, errs, nil
}

// gateConnectors lists the connectors with claimable jobs, outside any
// transaction: the gate may call this same store.
func (s *Store) gateConnectors(ctx context.Context, override time.Time, types string, fin []store.EndParams) ([]string, error) {
	now := s.clk.Now().UnixMicro()
	if !override.IsZero() {
		now = override.UnixMicro()
	}
	jobs := make([]string, len(fin))
	for i, f := range fin {
		jobs[i] = f.JobID
	}
	finJSON, err := json.Marshal(jobs)
	if err != nil {
		return nil, err
	}
	var conns []string
	err = s.read(ctx, func(*sql.Conn) error {
		st, err := s.jobStmt(ctx, qConnectors)
		if err != nil {
			return err
		}
		rows, err := st.QueryContext(ctx, now, types, !override.IsZero(), string(finJSON))
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
	return conns, wrap(err)
}

// deferGated moves the claimable jobs of each connector the gate refused
// to when it has capacity again.
func (tx *txn) deferGated(waits map[string]time.Duration, types string) error {
	if len(waits) == 0 {
		return nil
	}
	st, err := tx.s.jobStmt(tx.ctx, qDefer)
	if err != nil {
		return err
	}
	ids := make([]string, 0, len(waits))
	for id := range waits {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	mark(tx)
	for _, id := range ids {
		if _, err := st.ExecContext(tx.ctx, tx.now, types, id, tx.now+waits[id].Microseconds()); err != nil {
			return wrap(err)
		}
	}
	return nil
}

// claim picks up to p.Limit claimable jobs in fair order (store.PickClaims)
// and leases them to p.Holder at tx.now: the groups' read, one read per
// group it takes from, then two or three writes for all the picks. No row is locked by anyone else:
// the transaction is the file's only writer.
func (tx *txn) claim(p store.ClaimParams, types string, asked map[string]bool) ([]store.Claim, error) {
	now := tx.now
	rows, err := tx.query(qGroups, now, types)
	if err != nil {
		return nil, err
	}
	loads := map[string]store.GroupLoad{}
	var keys []string
	var seq int64
	for rows.Next() {
		var g string
		var l store.GroupLoad
		if err := rows.Scan(&g, &l.Weight, &l.Running, &l.LastClaim, &seq); err != nil {
			rows.Close()
			return nil, wrap(err)
		}
		loads[g] = l
		keys = append(keys, g)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, wrap(err)
	}
	if len(keys) == 0 {
		return nil, nil
	}
	for _, g := range keys {
		// A weighted group's weight-th most recent claim.
		if l := loads[g]; l.Weight > 1 {
			st, err := tx.s.jobStmt(tx.ctx, qWeighted)
			if err != nil {
				return nil, err
			}
			if err := st.QueryRowContext(tx.ctx, g, l.Weight).Scan(&l.LastClaim); err != nil {
				return nil, wrap(err)
			}
			loads[g] = l
		}
	}
	store.OrderGroups(keys, loads)
	hs, err := tx.heads(p.Limit, keys, loads, now, types)
	if err != nil {
		return nil, err
	}
	if asked != nil {
		hs.only(asked)
	}
	if len(hs.cands) == 0 {
		return nil, nil
	}
	picks := store.PickClaims(hs.cands, loads, p.Limit)
	ids := make([]string, len(picks))
	var expired []string
	for k, i := range picks {
		ids[k] = hs.cands[i].ID
		if hs.held[i] {
			expired = append(expired, ids[k])
		}
	}
	mark(tx)
	if len(expired) > 0 {
		arg, err := json.Marshal(expired)
		if err != nil {
			return nil, err
		}
		st, err := tx.s.jobStmt(tx.ctx, qAbandon)
		if err != nil {
			return nil, err
		}
		if _, err := st.ExecContext(tx.ctx, now, string(arg)); err != nil {
			return nil, wrap(err)
		}
	}
	idsJSON, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	out := make([]store.Claim, len(ids))
	rows, err = tx.query(qLease, p.Holder, now+p.LeaseTTL.Microseconds(), seq, now, string(idsJSON))
	if err != nil {
		return nil, err
	}
	leased := 0
	for rows.Next() {
		var cs int64
		j, err := store.ScanJob(func(dest ...any) error { return rows.Scan(append([]any{&cs}, dest...)...) })
		if err != nil {
			rows.Close()
			return nil, wrap(err)
		}
		k := cs - seq - 1
		if k < 0 || k >= int64(len(ids)) || ids[k] != j.ID || out[k].Job.ID != "" {
			rows.Close()
			return nil, fmt.Errorf("sqlitestore: claim: job %q leased with claim sequence %d, not in the picks' range", j.ID, cs)
		}
		out[k] = store.Claim{Job: j, Connector: hs.conns[j.ConnectorID], At: store.FromMicros(now)}
		leased++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, wrap(err)
	}
	if leased != len(ids) {
		return nil, fmt.Errorf("sqlitestore: claim: leased %d of %d picked jobs", leased, len(ids))
	}
	tokens := make([][2]any, len(out))
	for k := range out {
		tokens[k] = [2]any{out[k].Job.ID, out[k].Job.LeaseToken}
	}
	arg, err := json.Marshal(tokens)
	if err != nil {
		return nil, err
	}
	runIDs := make(map[string]int64, len(ids))
	rows, err = tx.query(qRuns, p.Holder, now, string(arg))
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id int64
		var job string
		if err := rows.Scan(&id, &job); err != nil {
			rows.Close()
			return nil, wrap(err)
		}
		runIDs[job] = id
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, wrap(err)
	}
	for k := range out {
		id, ok := runIDs[out[k].Job.ID]
		if !ok {
			return nil, fmt.Errorf("sqlitestore: claim: no run opened for job %q", out[k].Job.ID)
		}
		out[k].RunID = id
	}
	return out, nil
}

// claimHeads are the heads a claim read: the candidates, whether each one's
// lease expired (held[i] for cands[i]), and their connectors by id.
type claimHeads struct {
	cands []store.ClaimCandidate
	held  []bool
	conns map[string]store.Connector
}

// only keeps the candidates of the connectors the gate allowed.
func (hs *claimHeads) only(allowed map[string]bool) {
	keep := 0
	for i, c := range hs.cands {
		if allowed[c.ConnectorID] {
			hs.cands[keep], hs.held[keep] = c, hs.held[i]
			keep++
		}
	}
	hs.cands, hs.held = hs.cands[:keep], hs.held[:keep]
}

// heads reads the heads of the groups (keys, in fair order) that a claim of
// limit jobs can reach, in one statement in the common case.
func (tx *txn) heads(limit int, keys []string, loads map[string]store.GroupLoad, now int64, types string) (*claimHeads, error) {
	hs := &claimHeads{conns: map[string]store.Connector{}}
	share := func(k string) int { return store.GroupShare(limit, len(keys), loads[k].Weight) }
	// Each group gives the first round at least one job (it has a
	// claimable one: the groups' read said so in this transaction), so
	// the first limit groups in fair order are all the first round can
	// reach.
	first := keys[:min(len(keys), limit)]
	ks := make([]int, len(first))
	for i, k := range first {
		ks[i] = share(k)
	}
	n, err := tx.readHeads(hs, first, ks, now, types)
	if err != nil {
		return nil, err
	}
	// If the rounds could take more from a group than was read from it,
	// read up to limit from those.
	var full []string
	for i, k := range first {
		if n[k] == ks[i] && ks[i] < limit {
			full = append(full, k)
		}
	}
	if len(hs.cands) < limit && len(full) > 0 {
		drop := map[string]bool{}
		for _, k := range full {
			drop[k] = true
		}
		keep := 0
		for i, c := range hs.cands {
			if !drop[c.GroupKey] {
				hs.cands[keep], hs.held[keep] = c, hs.held[i]
				keep++
			}
		}
		hs.cands, hs.held = hs.cands[:keep], hs.held[:keep]
		ks = ks[:0]
		for range full {
			ks = append(ks, limit)
		}
		if _, err := tx.readHeads(hs, full, ks, now, types); err != nil {
			return nil, err
		}
	}
	return hs, nil
}

// readHeads reads up to ks[i] heads of each group groups[i] into hs,
// maxHeadGroups groups per statement, and counts them by group.
func (tx *txn) readHeads(hs *claimHeads, groups []string, ks []int, now int64, types string) (map[string]int, error) {
	n := map[string]int{}
	for len(groups) > 0 {
		m := min(len(groups), maxHeadGroups)
		st, err := tx.s.jobStmt(tx.ctx, qHeads+jobQuery(m-1))
		if err != nil {
			return nil, err
		}
		args := make([]any, 0, 2+2*m)
		args = append(args, now, types)
		for i := range m {
			args = append(args, groups[i], ks[i])
		}
		if err := hs.scan(tx.ctx, st, args, n); err != nil {
			return nil, wrap(err)
		}
		groups, ks = groups[m:], ks[m:]
	}
	return n, nil
}

// scan runs a heads statement and adds its rows to hs.
func (hs *claimHeads) scan(ctx context.Context, st *sql.Stmt, args []any, n map[string]int) error {
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var c store.ClaimCandidate
		var held bool
		cn, err := store.ScanConnector(func(dest ...any) error {
			return rows.Scan(append(dest, &c.ID, &c.GroupKey, &c.Priority, &c.NextRunAt, &held)...)
		})
		if err != nil {
			return err
		}
		c.ConnectorID = cn.ID
		hs.conns[cn.ID] = cn
		hs.cands = append(hs.cands, c)
		hs.held = append(hs.held, held)
		n[c.GroupKey]++
	}
	return rows.Err()
}

// The finishes' statements: ?1 is a JSON array of [job id, token, end
// time, next run, requests, retries, error], one per finish.
const (
	finishRowsSQL = `SELECT value->>0 AS i, value->>1 AS t, value->>2 AS n, value->>3 AS r, value->>4 AS q, value->>5 AS y, value->>6 AS e
FROM json_each(?1)`
	// finishHeldSQL names the finishes whose token holds their job.
	finishHeldSQL = `SELECT x.i FROM (` + finishRowsSQL + `) AS x
CROSS JOIN sluice_jobs j ON j.id = x.i AND j.lease_token = x.t AND +j.lease_holder <> ''`
	// finishRunsSQL ends the running run of every finish whose token
	// holds its job.
	finishRunsSQL = `UPDATE OR FAIL sluice_job_runs SET ended_at = x.n, outcome = 'succeeded', requests = x.q, retries = x.y, error = x.e
FROM (` + finishRowsSQL + `) AS x
WHERE sluice_job_runs.job_id = x.i AND sluice_job_runs.token = x.t AND sluice_job_runs.outcome = 'running'
AND EXISTS (SELECT 1 FROM sluice_jobs j WHERE j.id = x.i AND j.lease_token = x.t AND +j.lease_holder <> '')`
	// finishJobsSQL releases and schedules every job whose finish's token
	// holds it. No RETURNING: SQLite would keep a statement journal of
	// every page the update touches.
	finishJobsSQL = `UPDATE OR FAIL sluice_jobs SET lease_holder = '', lease_until = 0, next_run_at = x.r,
    last_success_at = x.n, consecutive_failures = 0, parked_reason = '', parked_until = 0
FROM (` + finishRowsSQL + `) AS x
WHERE sluice_jobs.id = x.i AND sluice_jobs.lease_token = x.t AND +sluice_jobs.lease_holder <> ''`
)

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
		clear(errs)
		return tx.finishes(ps, errs)
	})
	if err != nil {
		return nil, err
	}
	return errs, nil
}

// finishes ends the runs of ps (checked) as successes, each fenced on its
// own: errs[i] is set to ps[i]'s ErrStaleToken or ErrJobNotFound, with
// nothing written for it. Three statements for the batch; a batch that names
// a job twice is written finish by finish, in order, as the second of two
// finishes of one job is decided after the first.
func (tx *txn) finishes(ps []store.EndParams, errs []error) error {
	seen := make(map[string]bool, len(ps))
	for _, p := range ps {
		if seen[p.JobID] {
			for i := range ps {
				if err := tx.finishes(ps[i:i+1], errs[i:i+1]); err != nil {
					return err
				}
			}
			return nil
		}
		seen[p.JobID] = true
	}
	rows := make([][]any, len(ps))
	for i, p := range ps {
		now := tx.now
		if o := overrideOf(p.Now); o != 0 {
			now = o
		}
		rows[i] = []any{p.JobID, p.Token, now, now + p.Delay.Microseconds(), p.Stats.Requests, p.Stats.Retries, p.Error}
	}
	arg, err := json.Marshal(rows)
	if err != nil {
		return err
	}
	res, err := tx.query(qFinishHeld, string(arg))
	if err != nil {
		return err
	}
	done := make(map[string]bool, len(ps))
	for res.Next() {
		var id string
		if err := res.Scan(&id); err != nil {
			res.Close()
			return wrap(err)
		}
		done[id] = true
	}
	res.Close()
	if err := res.Err(); err != nil {
		return wrap(err)
	}
	if len(done) > 0 {
		mark(tx)
		st, err := tx.s.jobStmt(tx.ctx, qFinishRuns)
		if err != nil {
			return err
		}
		if _, err := st.ExecContext(tx.ctx, string(arg)); err != nil {
			return wrap(err)
		}
		if st, err = tx.s.jobStmt(tx.ctx, qFinishJobs); err != nil {
			return err
		}
		r, err := st.ExecContext(tx.ctx, string(arg))
		if err != nil {
			return wrap(err)
		}
		if n, err := r.RowsAffected(); err != nil || n != int64(len(done)) {
			return fmt.Errorf("sqlitestore: finishes: %d of %d held jobs written (%v)", n, len(done), err)
		}
	}
	for i, p := range ps {
		if done[p.JobID] {
			continue
		}
		// Not held by its token: stale, or no such job.
		errs[i] = held(tx, p.Fence)
		switch {
		case errs[i] == nil:
			return fmt.Errorf("sqlitestore: finish of job %q: held by its token but not written", p.JobID)
		case errors.Is(errs[i], store.ErrStaleToken), errors.Is(errs[i], store.ErrJobNotFound):
		default:
			return errs[i]
		}
	}
	return nil
}
