package job_test

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/job"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/migration"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

// The crash test runs workers as child processes (this test binary again,
// with crashChildEnv set) and kills them with SIGKILL mid-run.
const (
	crashChildEnv = "SLUICE_JOB_CRASH_CHILD"
	crashItems    = 3000
	crashPage     = 5
)

// crashHandler pages through crashItems items, crashPage at a time,
// writing each page durably to the sink file before committing the
// cursor after it: the seed 000 handler with a real durable write.
func crashHandler(sinkDB *sql.DB, pageDelay time.Duration) job.Handler {
	return func(ctx context.Context, run *job.Run) error {
		cur, _ := strconv.Atoi(run.Cursor())
		for cur < crashItems {
			var items []int
			if err := run.Call(ctx, func(ctx context.Context) error {
				t := time.NewTimer(pageDelay) // the provider's latency
				defer t.Stop()
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-t.C:
				}
				for i := cur; i < min(cur+crashPage, crashItems); i++ {
					items = append(items, i)
				}
				return nil
			}); err != nil {
				return err
			}
			tx, err := sinkDB.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			for _, it := range items {
				if _, err := tx.ExecContext(ctx, `INSERT INTO sink (item, token) VALUES (?, ?)`, it, run.Token()); err != nil {
					_ = tx.Rollback()
					return err
				}
			}
			if err := tx.Commit(); err != nil {
				return err
			}
			cur = items[len(items)-1] + 1
			if err := run.Commit(ctx, strconv.Itoa(cur)); err != nil {
				return err
			}
		}
		return nil
	}
}

func openSink(t testing.TB, path string) *sql.DB {
	db, err := migration.OpenSQLite(context.Background(), path, 0)
	require.NoError(t, err)
	_, err = db.Exec(`CREATE TABLE IF NOT EXISTS sink (item integer NOT NULL, token integer NOT NULL)`)
	require.NoError(t, err)
	return db
}

// TestCrashChild is the child worker process; it does nothing in a normal
// run.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("the crash test's child worker; runs only under TestCrashKillNineResumesFromCommittedCursor")
	}
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, filepath.Join(dir, "jobs.db"), sqlitestore.Config{})
	require.NoError(t, err)
	sink := openSink(t, filepath.Join(dir, "sink.db"))
	w, err := job.New(job.Config{Store: s, Holder: "child-" + strconv.Itoa(os.Getpid()), LeaseTTL: time.Second,
		Heartbeat: 100 * time.Millisecond, PollInterval: 5 * time.Millisecond,
		Handlers: map[string]job.Handler{"ohlcv": crashHandler(sink, 2*time.Millisecond)}})
	require.NoError(t, err)
	require.NoError(t, w.Run(ctx)) // until killed
}

// TestCrashKillNineResumesFromCommittedCursor: a worker process is killed
// with SIGKILL in the middle of a run, 20 times; each time another worker
// resumes from the last committed cursor. In the end every item was
// written, none of a committed slice is lost, and each crash re-fetched at
// most the one slice that was in flight.
func TestCrashKillNineResumesFromCommittedCursor(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("in the child")
	}
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s, err := sqlitestore.Open(ctx, filepath.Join(dir, "jobs.db"), sqlitestore.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	_, _, err = s.UpsertConnector(ctx, store.Connector{ID: "binance"})
	require.NoError(t, err)
	_, _, err = s.UpsertJob(ctx, store.JobSpec{ID: "binance:BTC/USDT:1m:ohlcv", ConnectorID: "binance", Type: "ohlcv"}, time.Time{})
	require.NoError(t, err)
	sink := openSink(t, filepath.Join(dir, "sink.db"))
	t.Cleanup(func() { _ = sink.Close() })

	cursor := func() int {
		j, err := s.GetJob(ctx, "binance:BTC/USDT:1m:ohlcv")
		require.NoError(t, err)
		n, _ := strconv.Atoi(j.Cursor)
		return n
	}
	const kills = 20
	for k := range kills {
		before := cursor()
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
		require.NoError(t, cmd.Start())
		// Wait for the child to commit a few slices past where it started.
		deadline := time.Now().Add(2 * time.Minute)
		for cursor() < before+3*crashPage {
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("kill %d: the child made no progress from cursor %d", k, before)
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // land anywhere in a slice
		require.NoError(t, cmd.Process.Kill())                      // SIGKILL
		_ = cmd.Wait()
		require.Less(t, cursor(), crashItems, "kill %d came after the run ended: not a crash mid-run", k)
	}
	// Finish in this process; the lease of the last child expires first.
	w, err := job.New(job.Config{Store: s, Holder: "finisher", LeaseTTL: time.Second,
		Handlers: map[string]job.Handler{"ohlcv": crashHandler(sink, 0)}})
	require.NoError(t, err)
	deadline := time.Now().Add(2 * time.Minute)
	for cursor() < crashItems {
		require.False(t, time.Now().After(deadline), "the finisher did not finish")
		if _, err := w.Poll(ctx); err != nil {
			require.NoError(t, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Every item written; duplicates only from the slices in flight at the
	// kills: at most one slice per kill.
	counts := map[int]int{}
	rows, err := sink.Query(`SELECT item FROM sink`)
	require.NoError(t, err)
	for rows.Next() {
		var it int
		require.NoError(t, rows.Scan(&it))
		counts[it]++
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	require.Len(t, counts, crashItems, "no committed slice lost")
	dup := 0
	for _, n := range counts {
		require.LessOrEqual(t, n, 2, "an item fetched more than twice")
		dup += n - 1
	}
	rs, err := s.ListRuns(ctx, store.ListParams{Limit: 1000})
	require.NoError(t, err)
	abandoned := 0
	for _, r := range rs {
		if r.Outcome == store.RunAbandoned {
			abandoned++
		}
	}
	// Every killed run was taken over (a child stalled past its lease on a
	// busy machine would add one more takeover, never fewer).
	require.GreaterOrEqual(t, abandoned, kills)
	require.LessOrEqual(t, dup, abandoned*crashPage, "at most one slice re-fetched per takeover")
	t.Logf("%d kills, %d takeovers: %d items re-written", kills, abandoned, dup)
}
