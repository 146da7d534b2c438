package slot_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/testenv"
	"github.com/sluicerl/sluice/slot"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/pgstore"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

// The cross-process fleet: 3 processes x 16 goroutines, each goroutine
// assigning its own events one by one and then a batch, all for one target
// time, and every process also assigning the same shared ids.
const (
	cpProcesses  = 3
	cpGoroutines = 16
	cpEach       = 10 // single events per goroutine
	cpBatch      = 50 // events of each goroutine's batch
	cpShared     = 10 // ids every goroutine of every process assigns
	cpMax        = 25
)

var cpAt = time.Date(2025, 6, 1, 12, 0, 1, 0, time.UTC)

// TestMain runs this binary as a child worker when asked to.
func TestMain(m *testing.M) {
	if os.Getenv("SLUICE_SLOT_CHILD") == "1" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

func openStore(ctx context.Context, backend, url string) (store.SlotStore, func(), error) {
	if backend == "sqlite" {
		st, err := sqlitestore.Open(ctx, url, sqlitestore.Config{})
		if err != nil {
			return nil, nil, err
		}
		return st, func() { _ = st.Close() }, nil
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, nil, err
	}
	st, err := pgstore.New(pool, pgstore.Config{})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return st, pool.Close, nil
}

// child assigns its share and prints "S id windowStart scheduledTime" for
// every shared id it was answered.
func child() int {
	ctx := context.Background()
	proc := os.Getenv("CP_PROC")
	st, closeFn, err := openStore(ctx, os.Getenv("CP_BACKEND"), os.Getenv("CP_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer closeFn()
	sch, err := slot.New(slot.Config{Store: st})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	fail := func(err error) {
		mu.Lock()
		fmt.Fprintln(os.Stderr, "child", proc, err)
		fmt.Fprintln(out, "E")
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for g := range cpGoroutines {
		wg.Go(func() {
			for i := range cpEach {
				if _, err := sch.Assign(ctx, fmt.Sprintf("p%s-g%d-%d", proc, g, i), "cp", cpAt); err != nil {
					fail(err)
					return
				}
				sid := fmt.Sprintf("shared-%d", (g+i)%cpShared)
				sl, err := sch.Assign(ctx, sid, "cp", cpAt)
				if err != nil {
					fail(err)
					return
				}
				mu.Lock()
				fmt.Fprintf(out, "S %s %d %d\n", sid, sl.WindowStart.UnixMicro(), sl.ScheduledTime.UnixMicro())
				mu.Unlock()
			}
			evs := make([]slot.Event, cpBatch)
			for i := range evs {
				evs[i] = slot.Event{EventID: fmt.Sprintf("p%s-g%d-b%d", proc, g, i), RequestedTime: cpAt}
			}
			res, err := sch.AssignBatch(ctx, "cp", evs)
			if err != nil {
				fail(err)
				return
			}
			for _, r := range res {
				if r.Err != nil {
					fail(r.Err)
					return
				}
			}
		})
	}
	wg.Wait()
	_ = out.Flush()
	return 0
}

func TestAcrossProcesses(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		crossProcess(t, "sqlite", filepath.Join(t.TempDir(), "slots.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		schema := testenv.PostgresSchema(t, "slot_cp_")
		surl := testenv.WithSearchPath(testenv.PostgresURL(), schema) + "&pool_max_conns=8"
		pool, err := pgxpool.New(ctx, surl)
		require.NoError(t, err)
		_, err = pgstore.Migrate(ctx, pool)
		pool.Close()
		require.NoError(t, err)
		crossProcess(t, "postgres", surl)
	})
}

// crossProcess runs the fleet against one backend and checks: no window
// over max, one slot per event (total slots equal events), counters equal
// rows (VerifySlots), every process saw the same slot for each shared id,
// and no process failed (a deadlock would fail it).
func crossProcess(t *testing.T, backend, url string) {
	ctx := context.Background()
	st, closeFn, err := openStore(ctx, backend, url)
	require.NoError(t, err)
	defer closeFn()
	sch, err := slot.New(slot.Config{Store: st})
	require.NoError(t, err)
	_, err = sch.PutConfig(ctx, store.SlotConfig{Name: "cp", MaxPerWindow: cpMax, WindowSize: 4 * time.Second, Headroom: 1000})
	require.NoError(t, err)

	var outs, errs [cpProcesses]bytes.Buffer
	cmds := make([]*exec.Cmd, cpProcesses)
	for i := range cpProcesses {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "SLUICE_SLOT_CHILD=1", "CP_BACKEND="+backend, "CP_URL="+url, fmt.Sprintf("CP_PROC=%d", i))
		cmd.Stdout, cmd.Stderr = &outs[i], &errs[i]
		require.NoError(t, cmd.Start())
		cmds[i] = cmd
	}
	for i, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "child %d: %s", i, errs[i].String())
	}
	shared := map[string]string{}
	for i := range cpProcesses {
		for line := range strings.Lines(outs[i].String()) {
			f := strings.Fields(line)
			require.Equal(t, "S", f[0], "child %d: %s", i, errs[i].String())
			got := f[2] + " " + f[3]
			if prev, ok := shared[f[1]]; ok {
				require.Equal(t, prev, got, "shared id %s got two slots", f[1])
			}
			shared[f[1]] = got
		}
	}
	require.Len(t, shared, cpShared)

	rep, err := sch.Verify(ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	want := int64(cpProcesses*cpGoroutines*(cpEach+cpBatch) + cpShared)
	require.Equal(t, want, rep.Slots)
	ws, err := sch.Windows(ctx, "cp", cpAt.Add(-time.Hour), cpAt.Add(24*time.Hour), 100_000)
	require.NoError(t, err)
	var total int64
	for _, w := range ws {
		require.LessOrEqual(t, w.Count, int64(cpMax))
		total += w.Count
	}
	require.Equal(t, want, total)
}

// TestBackendsAgree: PostgreSQL, SQLite and memory place the same events with the
// same jitter in exactly the same slots (singles and batches mixed, several
// requested times, repeats).
func TestBackendsAgree(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testenv.PostgresSchema(t, "slot_agree_")
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pgstore.Migrate(ctx, pool)
	require.NoError(t, err)
	pg, err := pgstore.New(pool, pgstore.Config{})
	require.NoError(t, err)
	lite, closeLite, err := openStore(ctx, "sqlite", filepath.Join(t.TempDir(), "agree.db"))
	require.NoError(t, err)
	defer closeLite()

	var schs []*slot.Scheduler
	for _, st := range []store.SlotStore{pg, lite, memstore.NewSlots(nil)} {
		s, err := slot.New(slot.Config{Store: st, Jitter: seeded(99)})
		require.NoError(t, err)
		_, err = s.PutConfig(ctx, store.SlotConfig{Name: "a", MaxPerWindow: 5, WindowSize: 1500 * time.Millisecond, Headroom: 10})
		require.NoError(t, err)
		schs = append(schs, s)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	at := func() time.Time { return cpAt.Add(time.Duration(rng.IntN(20_000_000)) * time.Microsecond) }
	for round := range 60 {
		if round%3 == 0 {
			evs := make([]slot.Event, 40)
			for i := range evs {
				evs[i] = slot.Event{EventID: fmt.Sprint("e", rng.IntN(400)), RequestedTime: at()}
			}
			var got [3][]slot.Result
			for k, s := range schs {
				got[k], err = s.AssignBatch(ctx, "a", evs)
				require.NoError(t, err)
			}
			require.Equal(t, got[0], got[1], "round %d", round)
			require.Equal(t, got[0], got[2], "round %d", round)
			continue
		}
		id, when := fmt.Sprint("e", rng.IntN(400)), at()
		var got [3]slot.Slot
		for k, s := range schs {
			got[k], err = s.Assign(ctx, id, "a", when)
			require.NoError(t, err)
		}
		require.Equal(t, got[0], got[1], "round %d", round)
		require.Equal(t, got[0], got[2], "round %d", round)
	}
	for _, s := range schs {
		rep, err := s.Verify(ctx)
		require.NoError(t, err)
		require.Empty(t, rep.Problems)
	}
}
