package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
)

// TestClaimPlans: SQLite's plans for the claim's reads, on a file holding
// many due jobs per group, probe indexes rather than read every due job: a
// group's heads walk sluice_jobs_group_order in claim order and stop at
// the limit (no sort of the group's due jobs), whether a group or a
// connector has a claimable job is one index range probe, and the writes
// find their rows by key; also after ANALYZE. A planner that sorts a group's due jobs makes
// every claim O(due jobs).
func TestClaimPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "plans.db"), Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	_, _, err = s.UpsertConnector(ctx, store.Connector{ID: "c"})
	require.NoError(t, err)
	for i := range 300 {
		_, _, err := s.UpsertJob(ctx, store.JobSpec{ID: fmt.Sprintf("j%04d", i), ConnectorID: "c", Type: "t", GroupKey: fmt.Sprintf("g%d", i%3)}, time.Time{})
		require.NoError(t, err)
	}
	// As a file would be after ANALYZE, too.
	for _, analyze := range []bool{false, true} {
		if analyze {
			require.NoError(t, s.read(ctx, func(conn *sql.Conn) error { _, err := conn.ExecContext(ctx, "ANALYZE"); return err }))
		}
		plan := func(q string) string {
			var b strings.Builder
			require.NoError(t, s.read(ctx, func(conn *sql.Conn) error {
				// Every statement takes at most 6 parameters: a time at which
				// every job is due, no types, then two groups and limits.
				rows, err := conn.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, int64(1)<<62, "", "g0", int64(4), "g1", int64(4))
				if err != nil {
					return err
				}
				defer rows.Close()
				for rows.Next() {
					var id, parent, unused int
					var detail string
					if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
						return err
					}
					b.WriteString(detail + "\n")
				}
				return rows.Err()
			}))
			return b.String()
		}
		heads := plan(headsSQL(2))
		require.Equal(t, 2, strings.Count(heads, "SEARCH j USING INDEX sluice_jobs_group_order (group_key=?)"), heads)
		require.NotContains(t, heads, "TEMP B-TREE", heads)
		require.Empty(t, jobScans(heads), heads)
		groups := plan(claimGroupsSQL)
		require.Contains(t, groups, "SEARCH j USING INDEX sluice_jobs_group_due (group_key=? AND next_run_at<?)", groups)
		require.Contains(t, groups, "SEARCH h USING INDEX sluice_jobs_group_held (group_key=?)", groups)
		require.Empty(t, jobScans(groups), groups)
		conns := plan(claimConnectorsSQL)
		require.Contains(t, conns, "SEARCH j USING INDEX sluice_jobs_connector_due (connector_id=? AND next_run_at<?)", conns)
		for _, q := range []string{claimLeaseSQL, finishHeldSQL, finishJobsSQL} {
			p := plan(q)
			require.Contains(t, p, "USING INDEX sqlite_autoindex_sluice_jobs_1 (id=?)", p)
			require.Empty(t, jobScans(p), p)
		}
		p := plan(finishRunsSQL)
		require.Contains(t, p, "USING INDEX sluice_job_runs_job (job_id=? AND token=?)", p)
	}
}

// jobScans are a plan's full scans of the jobs or runs tables (or one of
// their indexes), by any alias the statements give them.
func jobScans(plan string) []string {
	var out []string
	for _, l := range strings.Split(plan, "\n") {
		for _, t := range []string{"j", "h", "m", "a", "f", "sluice_jobs", "sluice_job_runs"} {
			if l == "SCAN "+t || strings.HasPrefix(l, "SCAN "+t+" ") {
				out = append(out, l)
			}
		}
	}
	return out
}
