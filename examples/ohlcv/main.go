// Command ohlcv is seed 000's worked example: OHLCV (klines) ingestion from
// a simulated exchange into SQLite by 2 worker processes that share the
// exchange's weight limit, one command:
//
//	go run ./examples/ohlcv                 # or: make example-ohlcv
//	go run ./examples/ohlcv -db ohlcv.db    # keep the file (then: sluice runs --db sqlite:ohlcv.db)
//
// The simulated exchange (sim.ProfileProvider's binance dialect behind a
// klines endpoint) counts request weight itself per window aligned to the
// clock, reports it in X-MBX-USED-WEIGHT-*, answers 429 past the window's
// budget and 418 (an IP ban) to a client that keeps coming back before its
// Retry-After. Its window is shortened to 40 weight per 2 s (Binance's is
// 6000 per minute) so that the run crosses several windows in seconds.
//
// jobs.yaml (seed 000's shape: pairs x timeframes x types) becomes one job
// per stream, binance:BTC/USDT:1m:ohlcv and so on. This process imports it
// into the SQLite file, serves the exchange on a loopback port and starts 2
// worker processes (this binary again). Each worker runs a job.Worker on
// the same file: it claims due jobs under a fenced lease, and its handler
// pages klines through Run.CallCost (weight 2 taken from the shared
// fixed-window policy binance-weight before each request is sent), writes
// each page to the candles table in one transaction and then commits the
// cursor ({"since_ms":...}) after it, until a page comes back empty. A job
// whose window is spent parks until the window ends; the gate before each
// claim leaves the connector's jobs alone until then. When every job has
// drained its stream, the workers are stopped and the summary printed from
// the exchange's own counts and the records.
package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sluicerl/sluice/job"
	"github.com/sluicerl/sluice/store"
)

//go:embed jobs.yaml
var defaultJobs []byte

// sinceMS is where every history starts and every job's first run begins:
// 2024-01-19T00:00:00Z, seed 000's example cursor.
const sinceMS = 1705622400000

func main() {
	if raw := os.Getenv(workerEnv); raw != "" {
		os.Exit(workerMain(raw))
	}
	if err := cli(); err != nil {
		fmt.Fprintln(os.Stderr, "ohlcv:", err)
		os.Exit(1)
	}
}

// options configure one run of the example.
type options struct {
	DB         string // SQLite file; empty with Postgres set
	Postgres   string // PostgreSQL URL (with its search_path) instead of SQLite
	Jobs       []byte // the jobs file
	Workers    int
	Capacity   int64         // the exchange's weight per window
	Window     time.Duration // the exchange's window
	Page       int           // candles per request
	PacingWait time.Duration // job.Config.MaxPacingWait
	BanAfter   int
	BanFor     time.Duration
	NoPacing   bool
	Timeout    time.Duration
	Log        io.Writer // the workers' output
	// Until, if set, says when the run is over, asked every 100 ms with
	// the jobs' ids. Nil means when every job has drained its stream.
	Until func(ctx context.Context, js store.JobStore, ids []string) (bool, error)
}

func cli() error {
	o := options{Log: os.Stderr}
	jobsFile := flag.String("jobs", "", "jobs file (default: the embedded jobs.yaml); its connector must name the policy "+policyName)
	flag.StringVar(&o.DB, "db", "", "SQLite file for the records and candles (default: a temporary one, removed at the end)")
	flag.StringVar(&o.Postgres, "postgres", "", "keep the records and candles in this PostgreSQL instead (postgres://...; its search_path picks the schema)")
	flag.IntVar(&o.Workers, "workers", 2, "worker processes")
	flag.Int64Var(&o.Capacity, "capacity", 40, "the exchange's request weight per window")
	flag.DurationVar(&o.Window, "window", 2*time.Second, "the exchange's window (aligned to the clock)")
	flag.IntVar(&o.Page, "page", 100, "candles per request (klines limit; weight 2 from 100 to 499)")
	flag.DurationVar(&o.PacingWait, "pacing-wait", -1, "longest a call waits for the window before its job parks (negative: park at once)")
	flag.IntVar(&o.BanAfter, "ban-after", 5, "early returns after a 429 that earn a 418 ban")
	flag.DurationVar(&o.BanFor, "ban-for", 10*time.Second, "length of the first ban")
	flag.BoolVar(&o.NoPacing, "no-pacing", false, "workers call the exchange without Sluice's limiter (to see what it answers then)")
	flag.DurationVar(&o.Timeout, "timeout", 2*time.Minute, "give up if the jobs have not drained by then")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	o.Jobs = defaultJobs
	if *jobsFile != "" {
		b, err := os.ReadFile(*jobsFile)
		if err != nil {
			return err
		}
		o.Jobs = b
	}
	if o.DB == "" && o.Postgres == "" {
		dir, err := os.MkdirTemp("", "sluice-ohlcv-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		o.DB = filepath.Join(dir, "ohlcv.db")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := coordinate(ctx, o)
	if res != nil {
		res.print(os.Stdout)
	}
	return err
}

// result is what one run did, read from the exchange and the records.
type result struct {
	opts     options
	margin   int64
	pids     []int
	imported job.ImportResult
	exchange exchangeStats
	jobs     []store.Job
	runs     []store.RunRecord // this run's
	candles  map[string]streamCount
	elapsed  time.Duration
}

func (o *options) check() error {
	switch {
	case o.Workers < 1 || o.Workers > 64:
		return fmt.Errorf("-workers must be from 1 to 64, got %d", o.Workers)
	case o.Window < 10*time.Millisecond:
		return fmt.Errorf("-window must be at least 10ms, got %s", o.Window)
	case o.Page < 100 || o.Page > 499:
		return fmt.Errorf("-page must be from 100 to 499 (klines of weight 2), got %d", o.Page)
	case o.Timeout <= 0:
		return fmt.Errorf("-timeout must be positive, got %s", o.Timeout)
	case o.BanAfter < 1 || o.BanFor <= 0:
		return fmt.Errorf("-ban-after and -ban-for must be positive")
	case !o.NoPacing && o.Capacity-int64(o.Workers)*klinesWeight < klinesWeight:
		return fmt.Errorf("-capacity %d leaves no room for one request beside the %d that %d workers can have in flight",
			o.Capacity, o.Workers, o.Workers)
	}
	return nil
}

// coordinate runs the example: the exchange in this process, the workers
// as processes of this binary, until every job has drained its stream.
func coordinate(ctx context.Context, o options) (*result, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	// A request charged at the end of one window can reach the exchange in
	// the next: the limiter keeps one request's weight per worker process
	// (each runs one job at a time) below the exchange's budget for them.
	res := &result{opts: o, margin: int64(o.Workers) * klinesWeight}
	ex, err := newExchange(o.Capacity, o.Window, time.UnixMilli(sinceMS).UTC(), o.BanAfter, o.BanFor)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: ex, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	rec, err := openRecords(ctx, o.DB, o.Postgres)
	if err != nil {
		return nil, err
	}
	defer rec.close()
	im, err := job.ParseImport(o.Jobs)
	if err != nil {
		return nil, err
	}
	if res.imported, err = im.Apply(ctx, rec.jobs); err != nil {
		return nil, err
	}
	if len(im.Jobs) == 0 {
		return nil, errors.New("the jobs file makes no jobs")
	}
	started := time.Now()
	// Every job runs now: the first time, or again from the cursor it
	// persisted when the example ran on this file before.
	for _, j := range im.Jobs {
		if err := rec.jobs.TriggerJob(ctx, j.ID, time.Time{}); err != nil {
			return nil, err
		}
	}

	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	type proc struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		done  chan error
	}
	var procs []*proc
	stopAll := func() {
		for _, p := range procs {
			_ = p.stdin.Close() // the worker finishes or releases what it holds, and exits
		}
		for _, p := range procs {
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
	}
	defer stopAll()
	for i := range o.Workers {
		wc := workerConfig{Holder: fmt.Sprintf("w%d", i+1), DB: o.DB, Postgres: o.Postgres, Exchange: "http://" + ln.Addr().String(),
			Rate: o.Capacity - res.margin, Window: o.Window, Page: o.Page, PacingWait: o.PacingWait, SinceMS: sinceMS, NoPacing: o.NoPacing}
		raw, _ := json.Marshal(wc)
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), workerEnv+"="+string(raw))
		cmd.Stdout, cmd.Stderr = o.Log, o.Log
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("starting worker %s: %w", wc.Holder, err)
		}
		p := &proc{cmd: cmd, stdin: stdin, done: make(chan error, 1)}
		go func() { p.done <- cmd.Wait() }()
		procs = append(procs, p)
		res.pids = append(res.pids, cmd.Process.Pid)
	}

	// Wait until every job has succeeded since the start (its stream is
	// drained up to the exchange's latest candle), or o.Until says so.
	until := o.Until
	if until == nil {
		until = func(ctx context.Context, js store.JobStore, ids []string) (bool, error) {
			for _, id := range ids {
				got, err := js.GetJob(ctx, id)
				if err != nil || got.LastSuccessAt.Before(started) {
					return false, err
				}
			}
			return true, nil
		}
	}
	ids := make([]string, len(im.Jobs))
	for i, j := range im.Jobs {
		ids[i] = j.ID
	}
	deadline := time.NewTimer(o.Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("interrupted: %w", ctx.Err())
		case <-deadline.C:
			return res, fmt.Errorf("the jobs had not drained after %s", o.Timeout)
		case <-tick.C:
		}
		for i, p := range procs {
			select {
			case err := <-p.done:
				p.done <- err
				return nil, fmt.Errorf("worker w%d (pid %d) exited early: %v", i+1, p.cmd.Process.Pid, err)
			default:
			}
		}
		if done, err = until(ctx, rec.jobs, ids); err != nil {
			return nil, err
		}
	}
	stopAll()
	procs = nil
	res.elapsed = time.Since(started)
	return res, res.collect(ctx, rec, im, ex, started)
}

// collect reads the run's figures from the exchange and the records.
func (res *result) collect(ctx context.Context, rec *records, im *job.Import, ex *exchange, started time.Time) error {
	res.exchange = ex.stats()
	for _, j := range im.Jobs {
		got, err := rec.jobs.GetJob(ctx, j.ID)
		if err != nil {
			return err
		}
		res.jobs = append(res.jobs, got)
	}
	for after := ""; ; {
		rs, err := rec.jobs.ListRuns(ctx, store.ListParams{After: after, Limit: store.MaxListLimit})
		if err != nil {
			return err
		}
		for _, r := range rs {
			if !r.StartedAt.Before(started) {
				res.runs = append(res.runs, r)
			}
		}
		if len(rs) < store.MaxListLimit {
			break
		}
		after = strconv.FormatInt(rs[len(rs)-1].ID, 10)
	}
	var err error
	res.candles, err = rec.countCandles(ctx)
	return err
}

func (res *result) print(w io.Writer) {
	o := res.opts
	where := "SQLite " + o.DB
	if o.Postgres != "" {
		where = "PostgreSQL"
	}
	pids := make([]string, len(res.pids))
	for i, p := range res.pids {
		pids[i] = strconv.Itoa(p)
	}
	ex := res.exchange
	fmt.Fprintf(w, "\nseed 000: %d jobs (jobs.yaml: pairs x timeframes) into %s by %d worker processes (pids %s)\n",
		len(res.jobs), where, len(res.pids), strings.Join(pids, ", "))
	im := res.imported
	fmt.Fprintf(w, "import:   connectors %d created, %d updated, %d unchanged; jobs %d created, %d updated, %d unchanged\n",
		im.ConnectorsCreated, im.ConnectorsUpdated, im.ConnectorsUnchanged, im.JobsCreated, im.JobsUpdated, im.JobsUnchanged)
	fmt.Fprintf(w, "exchange: %d weight per %s window (%s), klines weight %d, %d candles a page; 429 past it, 418 after %d early returns\n",
		o.Capacity, o.Window, strings.ToUpper(weightHeader(o.Window)), klinesWeight, o.Page, o.BanAfter)
	if o.NoPacing {
		fmt.Fprintln(w, "pacing:   none (-no-pacing)")
	} else {
		fmt.Fprintf(w, "pacing:   %s, fixed window of %d per %s: the exchange's %d less %d for requests in flight across a window's end\n",
			policyName, o.Capacity-res.margin, o.Window, o.Capacity, res.margin)
	}
	fmt.Fprintln(w)

	type outcomes struct{ ok, parked, failed, other, requests int64 }
	byJob := map[string]*outcomes{}
	byHolder := map[string]*outcomes{}
	add := func(m map[string]*outcomes, k string, r store.RunRecord) {
		x := m[k]
		if x == nil {
			x = &outcomes{}
			m[k] = x
		}
		x.requests += r.Requests
		switch r.Outcome {
		case store.RunSucceeded:
			x.ok++
		case store.RunParked:
			x.parked++
		case store.RunFailed:
			x.failed++
		default:
			x.other++
		}
	}
	for _, r := range res.runs {
		add(byJob, r.JobID, r)
		add(byHolder, r.Holder, r)
	}
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "job\tcandles\trequests\truns ok/parked/failed\tcursor")
	var candles, requests, rewritten int64
	for _, j := range res.jobs {
		var p struct{ Symbol, Timeframe string }
		_ = json.Unmarshal(j.Params, &p)
		c := res.candles[p.Symbol+" "+p.Timeframe]
		x := byJob[j.ID]
		if x == nil {
			x = &outcomes{}
		}
		candles += c.Candles
		rewritten += c.Rewritten
		requests += x.requests
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d/%d/%d\t%s\n", j.ID, c.Candles, x.requests, x.ok, x.parked, x.failed, j.Cursor)
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t\t\n", candles, requests)
	_ = tw.Flush()
	for _, line := range strings.SplitAfter(table.String(), "\n") {
		fmt.Fprint(w, strings.TrimRight(line, " \n")+strings.Repeat("\n", strings.Count(line, "\n")))
	}
	fmt.Fprintf(w, "candles written more than once: %d\n", rewritten)

	fmt.Fprintf(w, "\nexchange: %d requests, %d weight served, answered 429: %d, 418: %d\n",
		ex.Sim.Requests, ex.Sim.Weight, ex.Sim.Throttled, ex.Sim.Banned)
	used := make([]string, len(ex.Windows))
	for i, win := range ex.Windows {
		used[i] = strconv.FormatInt(win.Used, 10)
	}
	fmt.Fprintf(w, "weight used per %s window, as the exchange counted it (%d windows): %s\n", o.Window, len(ex.Windows), strings.Join(used, " "))
	fmt.Fprintf(w, "most weight used in any window: %d of %d\n", ex.MaxUsed(), o.Capacity)
	holders := make([]string, 0, len(byHolder))
	for h := range byHolder {
		holders = append(holders, h)
	}
	sort.Strings(holders)
	for _, h := range holders {
		x := byHolder[h]
		fmt.Fprintf(w, "worker %s: %d requests in %d runs (%d ok, %d parked, %d failed)\n", h, x.requests, x.ok+x.parked+x.failed+x.other, x.ok, x.parked, x.failed)
	}
	fmt.Fprintf(w, "drained in %.1fs\n", res.elapsed.Seconds())
}
