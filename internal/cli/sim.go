package cli

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicerl/sluice/sim"
	"github.com/sluicerl/sluice/sim/fleet"
	"github.com/sluicerl/sluice/store"
)

type simFlags struct {
	scenario   string
	dialect    string
	limit      float64
	changes    []string
	duration   time.Duration
	workers    int
	processes  int
	latency    time.Duration
	jitter     time.Duration
	burst      time.Duration
	window     bool
	millis     bool
	slowAfter  time.Duration
	client     string
	fixed      float64
	out        string
	target     string
	report     bool
	sharedRate bool
	state      string
	prefix     string
	timeout    time.Duration
	serve      string
	req        targetFlags
	profile    string // sim_profile.go
}

// simClients are the --client names.
var simClients = []string{"sluice", "sluice-local", "autothrottle", "fixed", "unpaced"}

func newSimCmd(opts *Options) *cobra.Command {
	var f simFlags
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run workers against a simulated (or real) rate-limited provider",
		Long: `Run a fleet of workers (--workers split over --processes, each process with
its own client) against a simulated provider whose limit the clients do not
know, and print second by second the attempts offered to the provider, the
attempts it admitted, the workers' goodput, throttle responses, bans,
retries and the clients' adapted rate; then the figures: goodput over the
limit after convergence, throttle share, time to converge, settle time
after a limit change.

The provider comes from flags (--dialect, --limit, --change, --latency,
--jitter, --burst, --fixed-window, --retry-after-millis) or from a YAML scenario
file (--scenario; flags given explicitly override it).
Dialects: ` + strings.Join(dialectNames(), ", ") + `.

--target URL drives the same workers through the client against any HTTP
endpoint instead (GET URL, or --method with --body, --header and a
per-request --cost put where --cost-in says, to drive a GraphQL or weighted
API); --limit then states the endpoint's true limit, if known, for the
figures. A 200 whose JSON carries GraphQL errors counts as an error (as a
throttle when THROTTLED), never as goodput; the summary names the target.

--serve ADDR serves the simulated provider over HTTP instead, so that
separate sluice sim --target processes can share it, and a store:
  sluice sim --serve 127.0.0.1:9000 --dialect ban --duration 40s &
  sluice sim --target http://127.0.0.1:9000/ --processes 1 --workers 4 \
      --state redis://127.0.0.1:6379 --state-prefix fleet1: &   # twice
A shared --state store that does not answer within --store-timeout fails
that call closed: it is not sent.

--out FILE.png or FILE.svg writes a chart, and FILE.json the summary and
every second. --report runs every dialect against every client (sluice,
sluice with --shared-rate, sluice-local, autothrottle, fixed at half and
twice the limit) at once and prints one table; --out FILE.json then writes
its rows.`,
		Example: `  sluice sim --dialect bare-429 --limit 50 --change 15s=25 --duration 30s
  sluice sim --scenario scenario.yaml --out run.svg
  sluice sim --target http://127.0.0.1:9000/api --limit 20 --duration 20s
  sluice sim --target http://127.0.0.1:9000/graphql --method POST \
      --body '{"query":"{ shop { name } }"}' --cost 10 --cost-in header:X-Query-Cost
  sluice sim --report --duration 30s`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSim(cmd, opts, &f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.scenario, "scenario", "", "YAML scenario file (name, provider, workers, processes, duration, slow_after)")
	fs.StringVar(&f.dialect, "dialect", "retry-after-seconds", "simulated provider's dialect")
	fs.Float64Var(&f.limit, "limit", 50, "hidden limit in requests per second (with --target: the endpoint's known limit)")
	fs.StringArrayVar(&f.changes, "change", nil, "limit change AT=LIMIT, e.g. 15s=25 (repeatable)")
	fs.DurationVar(&f.duration, "duration", 30*time.Second, "how long the workers run")
	fs.IntVar(&f.workers, "workers", 8, "workers in total")
	fs.IntVar(&f.processes, "processes", 2, "processes the workers are split over, each with its own client")
	fs.DurationVar(&f.latency, "latency", 20*time.Millisecond, "simulated provider's base latency")
	fs.DurationVar(&f.jitter, "jitter", 0, "simulated provider's answers take a random extra time, uniform in [0, jitter), on top of --latency")
	fs.DurationVar(&f.burst, "burst", 0, "simulated provider's bucket, as a duration of its limit (0: 100ms)")
	fs.BoolVar(&f.millis, "retry-after-millis", false, "the simulated provider sends Retry-After to the millisecond, the exact wait for its next token, instead of whole seconds (retry-after-seconds, ban)")
	fs.BoolVar(&f.window, "fixed-window", false, "the simulated provider counts requests in windows of a second aligned to the clock instead of a token bucket (retry-after-seconds, retry-after-date, bare-429, 503, ban)")
	fs.DurationVar(&f.slowAfter, "slow-after", 0, "count responses slower than this as throttles (0: the slowdown dialect's default, else never)")
	fs.StringVar(&f.client, "client", "sluice", "client: "+strings.Join(simClients, ", "))
	fs.Float64Var(&f.fixed, "fixed-factor", 0.5, "--client fixed: pace at this multiple of --limit")
	fs.BoolVar(&f.sharedRate, "shared-rate", false, "sluice clients keep the adapted rate in the shared store")
	fs.StringVar(&f.out, "out", "", "write a chart (FILE.png or FILE.svg) and FILE.json; with --report, FILE.json only")
	fs.StringVar(&f.target, "target", "", "drive the workers against this URL instead of a simulator")
	fs.BoolVar(&f.report, "report", false, "run every dialect against every client and print the table")
	fs.StringVar(&f.prefix, "state-prefix", "", "key prefix in the --state store; processes given the same one share the key (empty: one of this run's own)")
	fs.DurationVar(&f.timeout, "store-timeout", 0,
		"longest a sluice client's call waits for a shared --state store before it fails closed (0: serve's --store-timeout default)")
	fs.StringVar(&f.serve, "serve", "", "serve the simulated provider over HTTP on this address for --duration, for other processes' --target")
	f.req.register(fs)
	fs.StringVar(&f.profile, "profile", "", "apply this provider profile (sluice providers list) against its simulated provider, or all: every simulated profile in turn, as one table (sim_profile.go)")
	fs.StringVar(&f.state, "state", "memory:", "store the sluice clients' processes share: memory:, redis://..., postgres://..., sqlite:PATH (as serve --state)")
	return cmd
}

// options returns the figures' options over the --state store. Every run
// keys its state under a prefix of its own, so runs never meet in a shared
// store.
func (f *simFlags) options(cmd *cobra.Command) (fleet.Options, func(), error) {
	o := fleet.FigureOptions()
	if f.timeout < 0 {
		return o, nil, usagef("invalid --store-timeout %v: want a positive duration, or 0 for the default", f.timeout)
	}
	if f.state == "" || f.state == DefaultState {
		return o, func() {}, nil
	}
	st, err := openState(cmd.Context(), "--state", f.state, nil, f.timeout, nil, nil, 0)
	if err != nil {
		return o, nil, err
	}
	o.NewStore = func() (store.RateStore, error) { return st.store, nil }
	if f.prefix != "" {
		o.Outbound.Prefix = f.prefix
	} else {
		var b [6]byte
		_, _ = rand.Read(b[:])
		o.Outbound.Prefix = "sluice-sim:" + hex.EncodeToString(b[:]) + ":"
	}
	return o, st.close, nil
}

func dialectNames() []string {
	var out []string
	for _, d := range sim.Dialects() {
		out = append(out, d.String())
	}
	return out
}

// scenario builds the run's scenario from the file and the flags.
func (f *simFlags) scenarioFrom(cmd *cobra.Command) (sim.Scenario, error) {
	var sc sim.Scenario
	if f.scenario != "" {
		b, err := os.ReadFile(f.scenario)
		if err != nil {
			return sc, err
		}
		if sc, err = sim.ParseScenario(b); err != nil {
			return sc, fmt.Errorf("scenario %s: %w", f.scenario, err)
		}
	}
	fs := cmd.Flags()
	set := func(name string) bool { return f.scenario == "" || fs.Changed(name) }
	if set("dialect") {
		d, err := sim.ParseDialect(f.dialect)
		if err != nil {
			return sc, usagef("--dialect: %v", err)
		}
		sc.Provider.Dialect = d
	}
	if set("limit") {
		if !(f.limit > 0) {
			return sc, usagef("--limit must be a positive number of requests per second, got %v", f.limit)
		}
		sc.Provider.Limit = f.limit
	}
	if set("change") && len(f.changes) > 0 {
		sc.Provider.Changes = nil
		for _, c := range f.changes {
			at, lim, ok := strings.Cut(c, "=")
			d, err1 := time.ParseDuration(at)
			l, err2 := strconv.ParseFloat(lim, 64)
			if !ok || err1 != nil || err2 != nil {
				return sc, usagef("--change %q: want AT=LIMIT, e.g. 15s=25", c)
			}
			sc.Provider.Changes = append(sc.Provider.Changes, sim.Change{At: d, Limit: l})
		}
		slices.SortStableFunc(sc.Provider.Changes, func(a, b sim.Change) int { return int(a.At - b.At) })
	}
	for _, n := range []struct {
		name string
		bad  bool
	}{{"duration", f.duration <= 0}, {"workers", f.workers <= 0}, {"processes", f.processes <= 0}} {
		if fs.Changed(n.name) && n.bad {
			return sc, usagef("--%s must be positive, got %s", n.name, fs.Lookup(n.name).Value)
		}
	}
	if set("duration") {
		sc.Duration = f.duration
	}
	if set("workers") {
		sc.Workers = f.workers
	}
	if set("processes") {
		sc.Processes = f.processes
	}
	if set("latency") {
		sc.Provider.Latency = f.latency
	}
	if set("jitter") {
		sc.Provider.Jitter = f.jitter
	}
	if set("burst") {
		sc.Provider.Burst = f.burst
	}
	if set("fixed-window") {
		sc.Provider.FixedWindow = f.window
	}
	if set("retry-after-millis") {
		sc.Provider.RetryAfterMillis = f.millis
	}
	if set("slow-after") {
		sc.SlowAfter = f.slowAfter
	}
	if err := sc.Fill(); err != nil {
		return sc, usageError{err}
	}
	return sc, nil
}

func (f *simFlags) contender(o fleet.Options) (sim.Contender, error) {
	o.Outbound.SharedRate = f.sharedRate
	switch f.client {
	case "sluice":
		return fleet.Sluice("sluice", true, o), nil
	case "sluice-local":
		return fleet.Sluice("sluice-local", false, o), nil
	case "autothrottle":
		return fleet.AutoThrottle("autothrottle", sim.AutoThrottleConfig{}), nil
	case "fixed":
		if !(f.fixed > 0) {
			return sim.Contender{}, usagef("--fixed-factor must be positive, got %v", f.fixed)
		}
		return fleet.FixedGCRA(fmt.Sprintf("fixed-%gx", f.fixed), f.fixed), nil
	case "unpaced":
		return fleet.Unpaced("unpaced"), nil
	}
	return sim.Contender{}, usagef("--client %q: want one of %s", f.client, strings.Join(simClients, ", "))
}

func runSim(cmd *cobra.Command, opts *Options, f *simFlags) error {
	if f.out != "" {
		ext := strings.ToLower(filepath.Ext(f.out))
		switch {
		case f.report && ext != ".json":
			return usagef("--out with --report writes JSON: want FILE.json, got %q", f.out)
		case !f.report && ext != ".png" && ext != ".svg":
			return usagef("--out: want FILE.png or FILE.svg, got %q", f.out)
		}
		// Before the run, not after it.
		if err := checkWritableDir(f.out); err != nil {
			return usagef("--out %s: %v", f.out, err)
		}
	}
	if f.profile != "" {
		return runSimProfile(cmd, opts, f)
	}
	if f.report {
		if f.target != "" || f.serve != "" {
			return usagef("--report cannot be combined with --target or --serve")
		}
		return runSimReport(cmd, opts, f)
	}
	sc, err := f.scenarioFrom(cmd)
	if err != nil {
		return err
	}
	if f.serve != "" {
		if f.target != "" {
			return usagef("--serve and --target cannot be combined")
		}
		return serveSim(cmd, opts, f.serve, sc)
	}
	o, closeState, err := f.options(cmd)
	if err != nil {
		return err
	}
	defer closeState()
	c, err := f.contender(o)
	if err != nil {
		return err
	}
	newClient, err := c.NewRun(sc)
	if err != nil {
		return err
	}
	const row = "%5s %8s %8s %8s %8s %9s %6s %8s %9s\n"
	fmt.Fprintf(opts.Stdout, row, "t", "limit", "offered", "admitted", "goodput", "throttles", "bans", "retries", "rate")
	onSecond := func(s sim.Second) {
		lim := "-"
		if s.Limit > 0 {
			lim = strconv.FormatFloat(s.Limit, 'f', -1, 64)
		}
		d := func(v int64) string { return strconv.FormatInt(v, 10) }
		fmt.Fprintf(opts.Stdout, row, d(int64(s.T)), lim, d(s.Offered), d(s.Admitted), d(s.Goodput), d(s.Throttles),
			d(s.Bans), d(s.Retries), strconv.FormatFloat(s.Rate, 'f', 1, 64))
	}
	var res *sim.Result
	if f.target != "" {
		u, err := url.Parse(f.target)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return usagef("--target %q: want an http or https URL", f.target)
		}
		var limit func(time.Duration) float64
		if cmd.Flags().Changed("limit") || f.scenario != "" {
			base, changes := sc.Provider.Limit, sc.Provider.Changes
			limit = func(d time.Duration) float64 { return sim.LimitAt(base, changes, d) }
		}
		request, err := f.req.requester(f.target)
		if err != nil {
			return err
		}
		res, err = sim.Run(cmd.Context(), sim.Config{
			Workers: sc.Workers, Processes: sc.Processes, Duration: sc.Duration, URL: f.target, Request: request,
			Base: http.DefaultTransport, NewClient: newClient, Limit: limit, SlowAfter: sc.SlowAfter, OnSecond: onSecond,
		})
		if err != nil {
			return err
		}
	} else {
		res, err = sim.RunScenario(cmd.Context(), sc, nil, newClient, onSecond)
		if err != nil {
			return err
		}
	}
	sum := sim.Summarize(res)
	name := sc.Name
	if f.target != "" {
		name = f.target // not the simulated dialect, which did not run
		sc.Name = f.target
	}
	fmt.Fprintf(opts.Stdout, "\n%s, %s: %s\n", name, c.Name, describe(sum))
	if f.out == "" {
		return nil
	}
	if err := writeChart(f.out, fmt.Sprintf("%s: %s", name, c.Name), res); err != nil {
		return err
	}
	js := strings.TrimSuffix(f.out, filepath.Ext(f.out)) + ".json"
	if err := writeJSON(js, struct {
		Scenario sim.Scenario `json:"scenario"`
		Client   string       `json:"client"`
		Target   string       `json:"target,omitempty"`
		Summary  sim.Summary  `json:"summary"`
		Seconds  []sim.Second `json:"seconds"`
	}{sc, c.Name, f.target, sum, res.Seconds}); err != nil {
		return err
	}
	fmt.Fprintf(opts.Stdout, "wrote %s and %s\n", f.out, js)
	return nil
}

func describe(s sim.Summary) string {
	r := func(v float64, f string) string {
		if v < 0 {
			return "-"
		}
		return fmt.Sprintf(f, v)
	}
	sec := func(v int) string {
		if v < 0 {
			return "never"
		}
		return fmt.Sprintf("%ds", v)
	}
	return fmt.Sprintf("goodput/limit %s, throttles %s, bans %d, converged at %s, settled %s and re-converged %s after the change, retries %d of %d calls (%.1f%%)",
		r(s.GoodputRatio, "%.3f"), r(100*s.ThrottleRatio, "%.2f%%"), s.Bans, sec(s.ConvergeS), sec(s.SettleS), sec(s.ReconvergeS),
		s.Retries, s.Ops, 100*s.RetryRatio)
}

func runSimReport(cmd *cobra.Command, opts *Options, f *simFlags) error {
	if f.duration < 2*time.Second {
		return usagef("--duration must be at least 2s for --report, got %v", f.duration)
	}
	scenarios := sim.StandardScenarios(f.duration)
	for i := range scenarios {
		scenarios[i].Workers, scenarios[i].Processes = f.workers, f.processes
		if err := scenarios[i].Fill(); err != nil {
			return usageError{err}
		}
	}
	o, closeState, err := f.options(cmd)
	if err != nil {
		return err
	}
	defer closeState()
	o.Outbound.SharedRate = f.sharedRate
	contenders := fleet.Standard(o)
	fmt.Fprintf(opts.Stderr, "running %d dialects x %d clients for %v...\n", len(scenarios), len(contenders), f.duration)
	rows, err := sim.RunTable(cmd.Context(), scenarios, contenders, nil)
	if err != nil {
		return err
	}
	if err := sim.WriteTable(opts.Stdout, rows); err != nil {
		return err
	}
	if f.out != "" {
		if err := writeJSON(f.out, rows); err != nil {
			return err
		}
		fmt.Fprintf(opts.Stdout, "wrote %s\n", f.out)
	}
	return nil
}

// checkWritableDir checks that the directory of path exists and takes
// new files.
func checkWritableDir(path string) error {
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil {
		return fmt.Errorf("no directory %s", dir)
	} else if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".sluice-sim-*")
	if err != nil {
		return fmt.Errorf("cannot write in %s: %w", dir, errors.Unwrap(err))
	}
	_ = f.Close()
	return os.Remove(f.Name())
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// serveSim serves sc's provider over HTTP on addr for sc.Duration (or until
// the command's context ends), then prints what it answered.
func serveSim(cmd *cobra.Command, opts *Options, addr string, sc sim.Scenario) error {
	p, err := sim.NewProvider(sc.Provider)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--serve: %w", err)
	}
	hs := &http.Server{Handler: p, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	fmt.Fprintf(opts.Stdout, "simulated %s provider (limit %g/s) on http://%s for %v\n", sc.Provider.Dialect, sc.Provider.Limit, ln.Addr(), sc.Duration)
	if opts.Ready != nil {
		opts.Ready(ln.Addr())
	}
	t := time.NewTimer(sc.Duration)
	defer t.Stop()
	select {
	case err := <-served:
		return fmt.Errorf("--serve: %w", err)
	case <-t.C:
	case <-cmd.Context().Done():
	}
	_ = hs.Close()
	st := p.Stats()
	fmt.Fprintf(opts.Stdout, "requests %d, admitted %d, throttled %d, banned %d (bans %d)\n", st.Requests, st.Admitted, st.Throttled, st.Banned, st.Bans)
	return nil
}
