package crossproc

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/internal/testenv"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/pgstore"
	"github.com/sluicerl/sluice/store/redisstore"
)

// The shared limit: 1000 units per minute, bursts of 1000.
const (
	rate       = 1000
	period     = time.Minute
	processes  = 3
	goroutines = 64
	reps       = 20
)

var skews = [processes]time.Duration{-2 * time.Second, 0, 2 * time.Second}

// TestMain runs this binary as a child worker when asked to.
func TestMain(m *testing.M) {
	if os.Getenv("SLUICE_CROSSPROC_CHILD") == "1" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

// skewed is a replica's clock, off by a fixed amount. The store's clock
// decides, so the skew must change nothing.
type skewed struct {
	clock.Real
	by time.Duration
}

func (s skewed) Now() time.Time { return time.Now().Add(s.by) }

// child takes from the shared limit with 64 goroutines and prints one line
// per admission: "A <cost>".
func child() int {
	backend, url, prefix := os.Getenv("CP_BACKEND"), os.Getenv("CP_URL"), os.Getenv("CP_PREFIX")
	key := os.Getenv("CP_KEY")
	cost, _ := strconv.ParseInt(os.Getenv("CP_COST"), 10, 64)
	each, _ := strconv.Atoi(os.Getenv("CP_EACH"))
	skew, _ := time.ParseDuration(os.Getenv("CP_SKEW"))
	ctx := context.Background()

	var st store.RateStore
	switch backend {
	case "redis":
		opts, err := redis.ParseURL(url)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		c := redis.NewClient(opts)
		defer c.Close()
		rs, err := redisstore.New(c, redisstore.Config{Prefix: prefix})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		st = rs
	case "memory":
		// The control: each process alone, sharing nothing.
		st = memstore.New(memstore.Config{})
	case "postgres":
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer pool.Close()
		ps, err := pgstore.New(pool, pgstore.Config{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		st = ps
	}
	lim, err := limiter.New(limiter.Config{Store: st, Clock: skewed{by: skew}, Policies: []limiter.Policy{
		{Name: "shared", Rate: rate, Period: period, Burst: rate},
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	h, _ := lim.Handle("shared")
	// Every goroutine starts together, as soon as the store is reachable.
	if _, err := h.AllowN(ctx, key+"-warmup", 0); err != nil {
		fmt.Fprintln(os.Stderr, "warm-up:", err)
		return 2
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				// The limiter's own path, on a replica whose clock is off.
				d, err := h.AllowN(ctx, key, cost)
				if err != nil {
					failed.Add(1)
					fmt.Fprintln(os.Stderr, "take:", err)
					return
				}
				if d.Allowed {
					mu.Lock()
					fmt.Fprintf(out, "A %d\n", cost)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	_ = out.Flush()
	if failed.Load() > 0 {
		return 1
	}
	return 0
}

type backend struct {
	name, url, prefix string
}

func redisBackend(t *testing.T) backend {
	url := testenv.RedisURL()
	opts, err := redis.ParseURL(url)
	require.NoError(t, err)
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		testenv.Unreachable(t, "Redis at "+url, err)
	}
	prefix := fmt.Sprintf("crossproc-%016x:", rand.Uint64())
	t.Cleanup(func() {
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	return backend{name: "redis", url: url, prefix: prefix}
}

func postgresBackend(t *testing.T) backend {
	ctx := context.Background()
	schema := testenv.PostgresSchema(t, "crossproc_")
	surl := testenv.WithSearchPath(testenv.PostgresURL(), schema)
	pool, err := pgxpool.New(ctx, surl)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pgstore.Migrate(ctx, pool)
	require.NoError(t, err)
	return backend{name: "postgres", url: surl}
}

// TestExactAcrossProcesses: 3 processes x 64 goroutines offer twice the
// limit to one key through the limiter, 20 times per backend and cost, with
// the replicas' clocks at -2s, 0 and +2s. The fleet never admits more than
// burst + rate*t (t the whole run, from the first process's start to the
// last one's exit) and admits at least 0.99 of the limit.
func TestExactAcrossProcesses(t *testing.T) {
	t.Parallel()
	for _, mk := range []func(*testing.T) backend{redisBackend, postgresBackend} {
		for _, cost := range []int64{1, 7} {
			t.Run("", func(t *testing.T) {
				t.Parallel()
				b := mk(t)
				t.Logf("%s, cost %d", b.name, cost)
				for rep := range reps {
					admitted, bound, offered := run(t, b, cost, rep)
					require.LessOrEqual(t, admitted, bound,
						"%s cost %d rep %d: %d admitted, the limit allows %d", b.name, cost, rep, admitted, bound)
					require.GreaterOrEqual(t, float64(admitted), 0.99*float64(min(int64(rate), offered)),
						"%s cost %d rep %d: only %d of %d admitted", b.name, cost, rep, admitted, rate)
				}
			})
		}
	}
}

// TestControlUnsharedStoresOverAdmit shows the check above can fail: the
// same fleet with a store per process admits about three times the limit.
func TestControlUnsharedStoresOverAdmit(t *testing.T) {
	t.Parallel()
	admitted, bound, _ := run(t, backend{name: "memory"}, 1, 0)
	require.Greater(t, admitted, bound, "unshared stores must over-admit, or the check proves nothing")
}

// run starts the fleet once and returns the cost it admitted, the most the
// limit allows over the admissions' span, and the cost it offered.
func run(t *testing.T, b backend, cost int64, rep int) (admitted, bound, offered int64) {
	t.Helper()
	key := fmt.Sprintf("key-%d-%d-%016x", cost, rep, rand.Uint64())
	// Offer twice the limit in all.
	each := int((2*rate + processes*goroutines*cost - 1) / (processes * goroutines * cost))
	var outs [processes]bytes.Buffer
	var errs [processes]bytes.Buffer
	cmds := make([]*exec.Cmd, processes)
	start := time.Now()
	for i := range processes {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(),
			"SLUICE_CROSSPROC_CHILD=1",
			"CP_BACKEND="+b.name, "CP_URL="+b.url, "CP_PREFIX="+b.prefix, "CP_KEY="+key,
			"CP_COST="+strconv.FormatInt(cost, 10), "CP_EACH="+strconv.Itoa(each),
			"CP_SKEW="+skews[i].String())
		cmd.Stdout, cmd.Stderr = &outs[i], &errs[i]
		require.NoError(t, cmd.Start())
		cmds[i] = cmd
	}
	for i, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "child %d: %s", i, errs[i].String())
	}
	// Every admission happened within span: an upper bound on the time
	// the limit had to refill in.
	span := time.Since(start)
	for i := range processes {
		for line := range strings.Lines(outs[i].String()) {
			var c int64
			_, err := fmt.Sscanf(line, "A %d", &c)
			require.NoError(t, err, "child %d printed %q", i, line)
			admitted += c
		}
	}
	interval := period.Microseconds() / rate
	bound = rate + span.Microseconds()/interval
	offered = int64(processes*goroutines*each) * cost
	return admitted, bound, offered
}
