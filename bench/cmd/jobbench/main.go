// Command jobbench measures issue 16's figures in one process and one run:
// no-op jobs claimed and completed per second by Sluice's job.Worker on
// PostgreSQL and SQLite, every claim checking the connector's limit
// (job.CapacityGate peeks a limiter policy on the same database), beside
// River (github.com/riverqueue/river) on the same PostgreSQL; and Run.Call
// calls per second against calling the simulated provider directly.
//
//	cd bench && go run ./cmd/jobbench                  # 3 rounds, 10,000 jobs, 4 workers
//	go run ./cmd/jobbench -rounds 1 -jobs 2000 -only 'river|sluice/postgres'
//
// Each case of each round gets a fresh schema (or SQLite file) holding its
// due jobs before the clock starts; the clock stops when the last job's
// completion is recorded. Rounds alternate the cases; the table shows
// medians.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/sluicerl/sluice/aimd"
	"github.com/sluicerl/sluice/job"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/sim"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/pgstore"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

var (
	flagJobs    = flag.Int("jobs", 10000, "due no-op jobs per case")
	flagWorkers = flag.Int("workers", 4, "jobs run at once (Sluice Concurrency, River MaxWorkers)")
	flagGroups  = flag.Int("groups", 10, "Sluice fairness groups the jobs are spread over")
	flagAhead   = flag.Int("ahead", 0, "Sluice job.Config.ClaimAhead: jobs claimed beyond -workers, waiting for a slot (0: the default, -workers; -1: none)")
	flagRounds  = flag.Int("rounds", 3, "rounds; the table shows medians")
	flagCalls   = flag.Int("calls", 20000, "Run.Call figure: calls per round")
	flagOnly    = flag.String("only", "", "run only cases whose name matches this regexp")
	flagTimeout = flag.Duration("timeout", 10*time.Minute, "longest one case may take")
	flagCPU     = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flagClaims  = flag.Bool("claims", false, "print how many jobs Sluice's PostgreSQL claims asked for and took, and their mean time")
	flagStmts   = flag.Bool("stmts", false, "count the SQL statements of the PostgreSQL cases and print them per job, by statement")
)

type benchCase struct {
	name string
	unit string
	run  func(ctx context.Context, round int) (float64, error)
}

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "jobbench:", err)
		os.Exit(1)
	}
}

func pgURL() string {
	if u := os.Getenv("SLUICE_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

func run() error {
	only, err := regexp.Compile(*flagOnly)
	if err != nil {
		return fmt.Errorf("-only: %w", err)
	}
	if *flagJobs < 1 || *flagWorkers < 1 || *flagGroups < 1 || *flagRounds < 1 || *flagCalls < 1 {
		return errors.New("-jobs, -workers, -groups, -rounds and -calls must be >= 1")
	}
	cases := []benchCase{
		{"jobs/sluice/postgres", "jobs/s", sluicePostgres},
		{"jobs/river/postgres", "jobs/s", riverPostgres},
		{"jobs/sluice/sqlite", "jobs/s", sluiceSQLite},
		{"call/direct", "calls/s", callDirect},
		{"call/sluice", "calls/s", callSluice},
	}
	res := map[string][]float64{}
	skipped := map[string]string{}
	if *flagCPU != "" {
		f, err := os.Create(*flagCPU)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	load0, _ := os.ReadFile("/proc/loadavg")
	for round := range *flagRounds {
		for _, c := range cases {
			if !only.MatchString(c.name) || skipped[c.name] != "" {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), *flagTimeout)
			v, err := c.run(ctx, round)
			cancel()
			if err != nil {
				skipped[c.name] = err.Error()
				fmt.Fprintf(os.Stderr, "%s: skipped: %v\n", c.name, err)
				continue
			}
			fmt.Fprintf(os.Stderr, "round %d %-22s %10.0f %s\n", round+1, c.name, v, c.unit)
			res[c.name] = append(res[c.name], v)
		}
	}
	load1, _ := os.ReadFile("/proc/loadavg")
	ahead := fmt.Sprintf("claims %d ahead", *flagAhead)
	switch {
	case *flagAhead == 0:
		ahead = "claims ahead auto" // job.Config.ClaimAhead's default
	case *flagAhead < 0:
		ahead = "claims none ahead"
	}
	fmt.Printf("jobbench: %d due no-op jobs, %d workers (Sluice %s), %d groups, %d rounds (medians)\n", *flagJobs, *flagWorkers, ahead, *flagGroups, *flagRounds)
	fmt.Printf("load average before: %s", load0)
	fmt.Printf("load average after:  %s", load1)
	med := map[string]float64{}
	for _, c := range cases {
		if v := res[c.name]; len(v) > 0 {
			slices.Sort(v)
			med[c.name] = v[len(v)/2]
			fmt.Printf("%-22s %10.0f %-8s (runs %v)\n", c.name, med[c.name], c.unit, rounded(v))
		} else if why := skipped[c.name]; why != "" {
			fmt.Printf("%-22s skipped: %s\n", c.name, why)
		}
	}
	if *flagStmts {
		stmts.print(*flagJobs * *flagRounds)
	}
	if r := med["jobs/river/postgres"]; r > 0 {
		for _, n := range []string{"jobs/sluice/postgres", "jobs/sluice/sqlite"} {
			if v := med[n]; v > 0 {
				fmt.Printf("%s / river: %.2fx\n", n, v/r)
			}
		}
	}
	if d, s := med["call/direct"], med["call/sluice"]; d > 0 && s > 0 {
		fmt.Printf("Run.Call overhead: %.2fx the direct call's time (%.1f us per call added)\n", d/s, (1/s-1/d)*1e6)
	}
	return nil
}

func rounded(v []float64) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x + 0.5)
	}
	return out
}

// freshSchema creates a schema of its own and returns a pool whose
// search_path is it, and a function that drops it.
func freshSchema(ctx context.Context, prefix string, round int) (*pgxpool.Pool, string, func(), error) {
	admin, err := pgxpool.New(ctx, pgURL())
	if err != nil {
		return nil, "", nil, err
	}
	if err := admin.Ping(ctx); err != nil {
		admin.Close()
		return nil, "", nil, fmt.Errorf("postgres is unreachable: %w", err)
	}
	schema := fmt.Sprintf("%s%d_%d", prefix, os.Getpid(), round)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		admin.Close()
		return nil, "", nil, err
	}
	cfg, err := pgxpool.ParseConfig(pgURL())
	if err != nil {
		admin.Close()
		return nil, "", nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	if *flagStmts {
		cfg.ConnConfig.Tracer = stmts
	}
	cfg.MaxConns = int32(*flagWorkers + 8)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		admin.Close()
		return nil, "", nil, err
	}
	drop := func() {
		pool.Close()
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		admin.Close()
	}
	return pool, schema, drop, nil
}

// connectorPolicy is the connector's limit every claim checks: high
// enough never to hold a no-op job back, so that the figure is the cost of
// checking it.
var connectorPolicy = limiter.Policy{Name: "bench-connector", Rate: 1_000_000, Period: time.Second}

func sluicePostgres(ctx context.Context, round int) (float64, error) {
	pool, _, drop, err := freshSchema(ctx, "jobbench_sluice_", round)
	if err != nil {
		return 0, err
	}
	defer drop()
	if _, err := pgstore.Migrate(ctx, pool); err != nil {
		return 0, err
	}
	st, err := pgstore.New(pool, pgstore.Config{})
	if err != nil {
		return 0, err
	}
	// As autovacuum would on a table that grew by this much: without
	// statistics the planner sorts a group's due jobs instead of reading
	// its head from sluice_jobs_group_order.
	analyze := func() error {
		_, err := pool.Exec(ctx, `ANALYZE sluice_jobs, sluice_job_connectors, sluice_job_groups`)
		return err
	}
	if *flagClaims {
		cs := &claimSizes{Store: st}
		defer cs.print()

		return sluiceJobs(ctx, cs, st, analyze)
	}
	return sluiceJobs(ctx, st, st, analyze)
}

// claimSizes counts the claims of -claims.
type claimSizes struct {
	*pgstore.Store
	mu    sync.Mutex
	sizes map[int]int
	limit map[int]int
	dur   time.Duration
	n     int
}

func (c *claimSizes) ClaimJobs(ctx context.Context, p store.ClaimParams) ([]store.Claim, error) {
	t := time.Now()
	out, err := c.Store.ClaimJobs(ctx, p)
	c.count(p, out, t)
	return out, err
}

func (c *claimSizes) ClaimAndFinish(ctx context.Context, p store.ClaimParams, fin []store.EndParams) ([]store.Claim, []error, error) {
	t := time.Now()
	out, errs, err := c.Store.ClaimAndFinish(ctx, p, fin)
	c.count(p, out, t)
	return out, errs, err
}

func (c *claimSizes) count(p store.ClaimParams, out []store.Claim, t time.Time) {
	c.mu.Lock()
	if c.sizes == nil {
		c.sizes, c.limit = map[int]int{}, map[int]int{}
	}
	c.sizes[len(out)]++
	c.limit[p.Limit]++
	c.dur += time.Since(t)
	c.n++
	c.mu.Unlock()
}

func (c *claimSizes) print() {
	fmt.Fprintf(os.Stderr, "claims: %d, mean %v; jobs taken: claims %v; limits asked: claims %v\n", c.n, c.dur/time.Duration(max(c.n, 1)), c.sizes, c.limit)
}

func sluiceSQLite(ctx context.Context, round int) (float64, error) {
	dir, err := os.MkdirTemp("", "jobbench")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "jobs.db"), sqlitestore.Config{})
	if err != nil {
		return 0, err
	}
	defer st.Close()
	return sluiceJobs(ctx, st, st, func() error { return nil })
}

// sluiceJobs loads the due jobs, then times one Worker (Concurrency
// workers) claiming and finishing them all, every claim gated by a peek at
// the connector's limit in rates.
func sluiceJobs(ctx context.Context, st store.JobStore, rates store.RateStore, loaded func() error) (float64, error) {
	lim, err := limiter.New(limiter.Config{Store: rates, Policies: []limiter.Policy{connectorPolicy}})
	if err != nil {
		return 0, err
	}
	if _, _, err := st.UpsertConnector(ctx, store.Connector{ID: "bench", Policies: []string{connectorPolicy.Name}}); err != nil {
		return 0, err
	}
	n := *flagJobs
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if _, _, err := st.UpsertJob(ctx, store.JobSpec{ID: fmt.Sprintf("j%07d", i), ConnectorID: "bench", Type: "noop",
					GroupKey: fmt.Sprintf("g%d", i%int64(*flagGroups))}, time.Time{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	if err := loaded(); err != nil {
		return 0, err
	}
	var done atomic.Int64
	finished := make(chan struct{})
	var failed atomic.Value
	w, err := job.New(job.Config{
		Store:       st,
		Holder:      "bench",
		Concurrency: *flagWorkers,
		ClaimAhead:  *flagAhead,
		Limiter:     lim,
		Gate:        job.CapacityGate(lim, job.ConnectorPolicies(st, time.Minute, nil)),
		Handlers:    map[string]job.Handler{"noop": func(context.Context, *job.Run) error { return nil }},
		OnEvent: func(e job.Event) {
			switch e.Kind {
			case job.EventSuccess:
				if done.Add(1) == int64(n) {
					close(finished)
				}
			case job.EventClaim, job.EventCommit:
			default:
				failed.CompareAndSwap(nil, fmt.Sprintf("%s %s: %v", e.Kind, e.JobID, e.Err))
			}
		},
	})
	if err != nil {
		return 0, err
	}
	rctx, stop := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	start := time.Now()
	go func() { runErr <- w.Run(rctx) }()
	select {
	case <-finished:
	case err := <-runErr:
		stop()
		return 0, fmt.Errorf("worker stopped: %v", err)
	case <-ctx.Done():
		stop()
		<-runErr
		return 0, fmt.Errorf("%d of %d jobs done: %w", done.Load(), n, ctx.Err())
	}
	elapsed := time.Since(start)
	stop()
	if err := <-runErr; err != nil {
		return 0, err
	}
	if f := failed.Load(); f != nil {
		return 0, fmt.Errorf("a job did not succeed: %s", f)
	}
	return float64(n) / elapsed.Seconds(), nil
}

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (*noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// riverPostgres times River working the same number of due no-op jobs with
// MaxWorkers workers, on a schema of its own migrated by rivermigrate. Its
// fetch cooldown and poll interval are set low (1 ms, 50 ms), River's
// fastest documented settings, so that its figure is not its defaults'
// idle time.
func riverPostgres(ctx context.Context, round int) (float64, error) {
	pool, schema, drop, err := freshSchema(ctx, "jobbench_river_", round)
	if err != nil {
		return 0, err
	}
	defer drop()
	drv := riverpgxv5.New(pool)
	mig, err := rivermigrate.New(drv, &rivermigrate.Config{Schema: schema, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return 0, err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return 0, fmt.Errorf("river migrate: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	client, err := river.NewClient(drv, &river.Config{
		Schema:            schema,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: *flagWorkers}},
		Workers:           workers,
		FetchCooldown:     time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return 0, err
	}
	n := *flagJobs
	for i := 0; i < n; i += 1000 {
		params := make([]river.InsertManyParams, min(1000, n-i))
		for k := range params {
			params[k] = river.InsertManyParams{Args: noopArgs{}}
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return 0, fmt.Errorf("river insert: %w", err)
		}
	}
	if _, err := pool.Exec(ctx, `ANALYZE river_job`); err != nil {
		return 0, err
	}
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: n + 100, Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed}})
	defer cancel()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	defer func() { _ = client.Stop(context.WithoutCancel(ctx)) }()
	for done := 0; done < n; {
		select {
		case e := <-events:
			if e.Kind != river.EventKindJobCompleted {
				return 0, fmt.Errorf("river job %d: %s", e.Job.ID, e.Kind)
			}
			done++
		case <-ctx.Done():
			return 0, fmt.Errorf("river: %d of %d jobs done: %w", done, n, ctx.Err())
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// The Run.Call figure: a simulated exchange (weighted fixed window with
// used-weight headers, limit far above the load) served in process; each
// call is a GET whose response is read and closed.
func newExchange() (*sim.Provider, *http.Client, error) {
	p, err := sim.NewProvider(sim.ProviderConfig{Dialect: sim.WeightWindow, Limit: 1e9})
	if err != nil {
		return nil, nil, err
	}
	return p, &http.Client{Transport: sim.HandlerTransport{Handler: p}}, nil
}

func get(ctx context.Context, hc *http.Client) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://exchange.sim/api/v3/klines", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return &outbound.StatusError{Status: resp.StatusCode, Header: resp.Header}
	}
	return nil
}

// admittedAll checks that the provider served and admitted every call.
func admittedAll(p *sim.Provider, n int) error {
	if st := p.Stats(); st.Requests != int64(n) || st.Admitted != int64(n) {
		return fmt.Errorf("the provider saw %d requests and admitted %d, want %d", st.Requests, st.Admitted, n)
	}
	return nil
}

func callDirect(ctx context.Context, _ int) (float64, error) {
	p, hc, err := newExchange()
	if err != nil {
		return 0, err
	}
	n := *flagCalls
	start := time.Now()
	for range n {
		if err := get(ctx, hc); err != nil {
			return 0, err
		}
	}
	rate := float64(n) / time.Since(start).Seconds()
	return rate, admittedAll(p, n)
}

// callSluice makes the same calls from a job's handler through Run.Call:
// the connector's limiter policy (in memory) is charged before each, and
// each goes through the outbound client (breaker, adaptive rate started
// above the load, retries).
func callSluice(ctx context.Context, _ int) (float64, error) {
	p, hc, err := newExchange()
	if err != nil {
		return 0, err
	}
	rates := memstore.New(memstore.Config{})
	lim, err := limiter.New(limiter.Config{Store: rates, Policies: []limiter.Policy{connectorPolicy}})
	if err != nil {
		return 0, err
	}
	// The adaptive rate starts far above the load, so that the figure is
	// the layers' cost per call, not the slow start from 1/s that finds
	// an unknown provider's limit.
	out, err := outbound.New(outbound.Config{Store: rates, AIMD: aimd.Config{Start: 1e7, LatencyFactor: 1e6}})
	if err != nil {
		return 0, err
	}
	st := memstore.NewJobStore(memstore.JobConfig{})
	if _, _, err := st.UpsertConnector(ctx, store.Connector{ID: "exchange", Policies: []string{connectorPolicy.Name}}); err != nil {
		return 0, err
	}
	if _, _, err := st.UpsertJob(ctx, store.JobSpec{ID: "calls", ConnectorID: "exchange", Type: "calls"}, time.Time{}); err != nil {
		return 0, err
	}
	n := *flagCalls
	var rate float64
	var outcome job.Event
	w, err := job.New(job.Config{Store: st, Limiter: lim, Outbound: out, OnEvent: func(e job.Event) {
		if e.Kind != job.EventClaim {
			outcome = e
		}
	}, Handlers: map[string]job.Handler{"calls": func(ctx context.Context, r *job.Run) error {
		start := time.Now()
		for range n {
			if err := r.Call(ctx, func(ctx context.Context) error { return get(ctx, hc) }); err != nil {
				return err
			}
		}
		rate = float64(n) / time.Since(start).Seconds()
		return nil
	}}})
	if err != nil {
		return 0, err
	}
	ran, err := w.Poll(ctx)
	if err != nil {
		return 0, err
	}
	if ran != 1 || outcome.Kind != job.EventSuccess {
		return 0, fmt.Errorf("the calling job did not run to success (ran %d): %s %v", ran, outcome.Kind, outcome.Err)
	}
	return rate, admittedAll(p, n)
}
