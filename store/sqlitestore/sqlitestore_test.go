package sqlitestore_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/migration"
	"github.com/sluicerl/sluice/store/sqlitestore"
	"github.com/sluicerl/sluice/store/storetest"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func open(tb testing.TB, path string, cfg sqlitestore.Config) *sqlitestore.Store {
	tb.Helper()
	s, err := sqlitestore.Open(context.Background(), path, cfg)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

func newStore(tb testing.TB) (*sqlitestore.Store, string) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "state.db")
	return open(tb, path, sqlitestore.Config{}), path
}

func TestConformance(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	storetest.Run(t, func(*testing.T) store.RateStore { return s })
}

func TestDifferential(t *testing.T) {
	t.Parallel()
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			s, _ := newStore(t)
			storetest.Differential(t, s, memstore.New(memstore.Config{}), seed, 1500)
		})
	}
}

func TestFileSettings(t *testing.T) {
	t.Parallel()
	_, path := newStore(t)
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer db.Close()
	var mode string
	require.NoError(t, db.QueryRow("PRAGMA journal_mode").Scan(&mode))
	require.Equal(t, "wal", mode)
	var n int
	require.NoError(t, db.QueryRow("SELECT count(*) FROM sluice_schema_migrations").Scan(&n))
	ms, err := migration.Migrations(migration.SQLite)
	require.NoError(t, err)
	require.Equal(t, len(ms), n) // every embedded migration is applied
}

// TestClockNeverRunsBackwards: the store clock stands still while the
// process clock is behind, within a process and across a restart.
func TestClockNeverRunsBackwards(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "clock.db")
	ctx := context.Background()
	fake := clocktest.New(t0)
	s, err := sqlitestore.Open(ctx, path, sqlitestore.Config{Clock: fake})
	require.NoError(t, err)
	l := store.Limit{Name: "l", Rate: 10, Period: time.Second}
	res, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
	require.NoError(t, err)
	require.Equal(t, t0.UnixMicro(), res.At)
	fake.Advance(time.Second)
	res, err = s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
	require.NoError(t, err)
	last := res.At
	require.Equal(t, t0.Add(time.Second).UnixMicro(), last)

	fake.Advance(-time.Hour)
	now, err := s.Now(ctx)
	require.NoError(t, err)
	require.Equal(t, last, now.UnixMicro(), "the clock stands still")
	require.NoError(t, s.Close())
	_, err = s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
	require.ErrorIs(t, err, store.ErrClosed)

	// A new process whose clock is a day behind.
	behind := clocktest.New(t0.Add(-24 * time.Hour))
	s2 := open(t, path, sqlitestore.Config{Clock: behind})
	now, err = s2.Now(ctx)
	require.NoError(t, err)
	require.Equal(t, last, now.UnixMicro(), "the file's high-water mark holds the clock")
	res, err = s2.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
	require.NoError(t, err)
	require.Equal(t, last, res.At)
	require.Equal(t, int64(8), res.Remaining, "the take before the restart, at the same instant, is still charged")
}

// TestTwoHandlesShareExactly opens the same file twice (as two processes
// would) and hammers one key from both: the admitted cost never exceeds the
// limit, because every decision holds the file's write lock.
func TestTwoHandlesShareExactly(t *testing.T) {
	t.Parallel()
	a, path := newStore(t)
	b := open(t, path, sqlitestore.Config{})
	ctx := context.Background()
	l := store.Limit{Name: "shared", Rate: 100, Period: time.Hour}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		s := a
		if g%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				cost := int64(1 + (g+i)%3)
				res, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: cost})
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					admitted.Add(cost)
				}
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, admitted.Load(), int64(100))
	require.GreaterOrEqual(t, admitted.Load(), int64(98))
	peek, err := b.Take(ctx, store.TakeParams{Key: "k", Limit: l})
	require.NoError(t, err)
	require.Equal(t, 100-admitted.Load(), peek.Remaining)
}

func TestCleanupDropsOnlyFreshRows(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gc.db")
	fake := clocktest.New(t0)
	s := open(t, path, sqlitestore.Config{Clock: fake, CleanupBatch: 7})
	ctx := context.Background()
	short := store.Limit{Name: "short", Rate: 10, Period: time.Second}
	long := store.Limit{Name: "long", Algorithm: store.FixedWindow, Rate: 10, Period: 24 * time.Hour}
	for i := range 30 {
		_, err := s.Take(ctx, store.TakeParams{Key: fmt.Sprint("s", i), Limit: short, Cost: 2})
		require.NoError(t, err)
	}
	for i := range 3 {
		_, err := s.Take(ctx, store.TakeParams{Key: fmt.Sprint("l", i), Limit: long, Cost: 2})
		require.NoError(t, err)
	}
	n, err := s.Cleanup(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "nothing is fresh yet")
	fake.Advance(time.Minute)
	n, err = s.Cleanup(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(30), n)
	res, err := s.Take(ctx, store.TakeParams{Key: "l0", Limit: long})
	require.NoError(t, err)
	require.Equal(t, int64(8), res.Remaining)
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	_, err := sqlitestore.Open(context.Background(), "", sqlitestore.Config{})
	require.Error(t, err)
	_, err = sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "x.db"), sqlitestore.Config{BusyTimeout: -1})
	require.Error(t, err)
	// Without migrations there is no schema to prepare against.
	_, err = sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "y.db"), sqlitestore.Config{SkipMigrations: true})
	require.Error(t, err)
}

// The kill -9 test: a child process (this test binary, re-executed) takes
// decisions and prints each acknowledged one; the parent SIGKILLs it in the
// middle of the run, reopens the file and checks that every acknowledged
// admission is still charged.

const helperEnv = "SLUICE_SQLITESTORE_HELPER_DB"

// killLimit refills one unit every 360 s, so the budget read back after the
// kill is exactly the burst minus what was charged.
var killLimit = store.Limit{Name: "kill9", Rate: 1_000_000, Period: 100_000 * time.Hour}

func TestHelperProcess(t *testing.T) {
	path := os.Getenv(helperEnv)
	if path == "" {
		t.Skip("the child of TestKill9KeepsAcknowledgedDecisions")
	}
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, path, sqlitestore.Config{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	var mu sync.Mutex // one line at a time on stdout
	var wg sync.WaitGroup
	deadline := time.Now().Add(time.Minute) // bounded even if never killed
	for g := range 4 {
		cost := int64(g + 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				res, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: killLimit, Cost: cost})
				mu.Lock()
				switch {
				case err != nil:
					fmt.Println("error", err)
				case res.Allowed:
					fmt.Printf("ok %d %d\n", cost, res.At)
				default:
					fmt.Println("denied")
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	os.Exit(0)
}

func TestKill9KeepsAcknowledgedDecisions(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "kill9.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()

	var acked, lastAt int64
	lines := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] == "PASS" || f[0] == "ok" && len(f) != 3 {
			continue
		}
		if f[0] != "ok" {
			t.Fatalf("child: %s", sc.Text())
		}
		cost, err1 := strconv.ParseInt(f[1], 10, 64)
		at, err2 := strconv.ParseInt(f[2], 10, 64)
		require.NoError(t, errors.Join(err1, err2))
		acked += cost
		lastAt = max(lastAt, at)
		lines++
		if lines == 200 {
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			killed = true
		}
	}
	require.True(t, killed, "the child stopped before it was killed")
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	ws, ok := ee.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.Equal(t, syscall.SIGKILL, ws.Signal(), "the child was killed, not finished")

	// Reopen with a clock a day behind: the file's high-water mark must
	// hold the store clock at or after the last acknowledged decision.
	s := open(t, path, sqlitestore.Config{Clock: clocktest.New(time.UnixMicro(lastAt).Add(-24 * time.Hour))})
	ctx := context.Background()
	now, err := s.Now(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, now.UnixMicro(), lastAt)
	peek, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: killLimit})
	require.NoError(t, err)
	charged := killLimit.Rate - peek.Remaining
	// Every acknowledged take is charged; at most one take per child
	// goroutine (costs 1+2+3+4) was committed but not yet printed.
	require.GreaterOrEqual(t, charged, acked, "an acknowledged decision was lost")
	require.LessOrEqual(t, charged, acked+10)
	t.Logf("acknowledged %d units in %d decisions, %d charged after kill -9", acked, lines, charged)
}

func TestCanceledContext(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l := store.Limit{Name: "l", Rate: 10, Period: time.Second}
	_, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
	require.ErrorIs(t, err, context.Canceled)
	res, err := s.Take(context.Background(), store.TakeParams{Key: "k", Limit: l, Cost: 1})
	require.NoError(t, err)
	require.Equal(t, int64(9), res.Remaining, "the canceled call charged nothing")
}

// TestGroupCommitExact: under concurrent load every goroutine's
// decisions are answered in a consistent order (no charge is lost or
// doubled), whatever batches the group commit forms.
func TestGroupCommitExact(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	l := store.Limit{Name: "g", Algorithm: store.FixedWindow, Rate: 1000, Period: 24 * time.Hour}
	other := store.Limit{Name: "o", Rate: 1000, Period: 24 * time.Hour}
	var wg sync.WaitGroup
	var a, o atomic.Int64
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				if (g+i)%4 == 0 {
					res, err := s.TakeAll(ctx, store.TakeAllParams{Now: t0, Items: []store.Item{
						{Key: "k", Limit: l, Cost: 2}, {Key: "k", Limit: other, Cost: 3}}})
					if err != nil {
						t.Error(err)
						return
					}
					if res.Allowed {
						a.Add(2)
						o.Add(3)
					}
					continue
				}
				res, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1, Now: t0})
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					a.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	pa, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Now: t0})
	require.NoError(t, err)
	po, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: other, Now: t0})
	require.NoError(t, err)
	require.Equal(t, 1000-a.Load(), pa.Remaining)
	require.Equal(t, 1000-o.Load(), po.Remaining)
}

// FuzzDifferential runs storetest.FuzzDifferential against one SQLite
// store shared by every input.
func FuzzDifferential(f *testing.F) {
	s, _ := newStore(f)
	storetest.FuzzDifferential(f, func(*testing.T) store.RateStore { return s },
		func() store.RateStore { return memstore.New(memstore.Config{}) })
}

// TestBusyBeginIsAskedAgain: a write whose BEGIN IMMEDIATE finds the file's
// write lock held past busy_timeout (another process, or several taking
// turns on a busy machine) asks again, up to MaxBusyWait, instead of
// failing: it succeeds once the lock is free. Past MaxBusyWait it fails
// with SQLITE_BUSY.
func TestBusyBeginIsAskedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "busy.db")
	l := store.Limit{Name: "busy", Rate: 10, Period: time.Hour}
	patient := open(t, path, sqlitestore.Config{BusyTimeout: 10 * time.Millisecond, MaxBusyWait: time.Minute})
	hasty := open(t, path, sqlitestore.Config{BusyTimeout: 10 * time.Millisecond, MaxBusyWait: 10 * time.Millisecond})
	_, err := patient.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
	require.NoError(t, err)

	// Another connection holds the write lock.
	db, err := migration.OpenSQLite(ctx, path, time.Second)
	require.NoError(t, err)
	defer db.Close()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)

	_, err = hasty.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
	require.Error(t, err, "past MaxBusyWait a write gives up")
	require.True(t, migration.IsBusy(err), "%v", err)

	done := make(chan error, 1)
	go func() {
		_, err := patient.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
		done <- err
	}()
	// Held for many busy timeouts: a single BEGIN would have failed.
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("the take answered while the lock was held: %v", err)
	default:
	}
	_, err = conn.ExecContext(ctx, "COMMIT")
	require.NoError(t, err)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("no answer within a minute of the lock's release")
	}
	r, err := patient.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 0})
	require.NoError(t, err)
	require.Equal(t, int64(10-2), r.Remaining, "the refused write charged nothing, the patient one once")
}
