package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicerl/sluice/clock"
)

// Scenario is one simulated provider and the fleet that calls it: a plain
// value whose zero value, once filled (Fill), is the default provider with 8
// workers in 2 processes for 30 s.
type Scenario struct {
	Name     string         `json:"name" yaml:"name"`
	Provider ProviderConfig `json:"provider" yaml:"provider"`
	// Workers and Processes: zero means 8 and 2.
	Workers   int `json:"workers" yaml:"workers"`
	Processes int `json:"processes" yaml:"processes"`
	// Duration: zero means 30 s.
	Duration time.Duration `json:"duration" yaml:"duration"`
	// SlowAfter: see Config.SlowAfter. Zero means, for Slowdown, three
	// times the provider's Latency plus its Jitter and two service
	// intervals at the starting limit; for the other dialects, never.
	SlowAfter time.Duration `json:"slow_after" yaml:"slow_after"`
}

// Fill applies the scenario's defaults and validates it.
func (s *Scenario) Fill() error {
	if s.Workers == 0 {
		s.Workers = 8
	}
	if s.Processes == 0 {
		s.Processes = 2
	}
	if s.Duration == 0 {
		s.Duration = 30 * time.Second
	}
	if s.Workers < 0 || s.Processes < 0 || s.Processes > s.Workers {
		return fmt.Errorf("%w: scenario %q: need 0 < processes <= workers, got %d and %d", ErrInvalidConfig, s.Name, s.Processes, s.Workers)
	}
	if s.Duration < time.Second {
		return fmt.Errorf("%w: scenario %q: duration must be at least 1s, got %v", ErrInvalidConfig, s.Name, s.Duration)
	}
	p := s.Provider
	if err := p.defaults(); err != nil {
		return fmt.Errorf("scenario %q: %w", s.Name, err)
	}
	if s.SlowAfter < 0 {
		return fmt.Errorf("%w: scenario %q: slow_after must be >= 0, got %v", ErrInvalidConfig, s.Name, s.SlowAfter)
	}
	if s.SlowAfter == 0 && s.Provider.Dialect == Slowdown {
		s.SlowAfter = 3*p.Latency + p.Jitter + time.Duration(2*float64(time.Second)/p.Limit)
	}
	if s.Name == "" {
		s.Name = s.Provider.Dialect.String()
	}
	return nil
}

// StandardScenarios returns the figures' scenarios: one per dialect, 8
// workers in 2 processes, a hidden limit of 50 requests per second that
// halves half way through d, and 20 ms of service latency.
func StandardScenarios(d time.Duration) []Scenario {
	var out []Scenario
	for _, dl := range Dialects() {
		out = append(out, Scenario{
			Name: dl.String(),
			Provider: ProviderConfig{
				Dialect: dl, Limit: 50, Latency: 20 * time.Millisecond,
				Changes: []Change{{At: d / 2, Limit: 25}},
			},
			Duration: d,
		})
	}
	return out
}

// Contender is a client under test in a table: NewRun is called once per
// scenario run and returns the NewClient for that run's processes, so
// that processes of one run can share state (a store) and runs cannot.
// sc.Provider.Clock is the run's clock (nil: the real clock); a contender
// times its clients with it. A plain value; NewRun may be called from
// several goroutines at once.
type Contender struct {
	Name   string
	NewRun func(sc Scenario) (func(process int, base http.RoundTripper) (Client, error), error)
}

// Row is one contender's run of one scenario: a plain value.
type Row struct {
	Scenario  string  `json:"scenario"`
	Contender string  `json:"contender"`
	Summary   Summary `json:"summary"`
	Result    *Result `json:"result,omitempty"`
}

// RunScenario runs one scenario with the client NewClient builds, against
// a fresh simulated provider served in process.
// onSecond, if set, sees each second as it ends (see Config.OnSecond).
func RunScenario(ctx context.Context, sc Scenario, clk clock.Clock, newClient func(int, http.RoundTripper) (Client, error), onSecond func(Second)) (*Result, error) {
	if err := sc.Fill(); err != nil {
		return nil, err
	}
	pc := sc.Provider
	pc.Clock = clk
	p, err := NewProvider(pc)
	if err != nil {
		return nil, err
	}
	return Run(ctx, Config{
		Workers: sc.Workers, Processes: sc.Processes, Duration: sc.Duration,
		Base: HandlerTransport{Handler: p}, NewClient: newClient,
		Limit: p.LimitAt, SlowAfter: sc.SlowAfter, Clock: clk, OnSecond: onSecond,
	})
}

// RunTable runs every contender against every scenario, all at once, each
// run against its own provider, and returns the rows in scenario-major
// order. Everything runs on clk (nil: the real clock): the providers, the
// harness, and the contenders, whose NewRun gets it as sc.Provider.Clock.
func RunTable(ctx context.Context, scenarios []Scenario, contenders []Contender, clk clock.Clock) ([]Row, error) {
	rows := make([]Row, len(scenarios)*len(contenders))
	errs := make([]error, len(rows))
	var wg sync.WaitGroup
	for i, sc := range scenarios {
		if err := sc.Fill(); err != nil {
			return nil, err
		}
		// The contenders see the run's clock (their NewRun's
		// sc.Provider.Clock), as the provider does.
		sc.Provider.Clock = clk
		for j, c := range contenders {
			k := i*len(contenders) + j
			rows[k] = Row{Scenario: sc.Name, Contender: c.Name}
			wg.Go(func() {
				nc, err := c.NewRun(sc)
				if err != nil {
					errs[k] = fmt.Errorf("%s / %s: %w", sc.Name, c.Name, err)
					return
				}
				res, err := RunScenario(ctx, sc, clk, nc, nil)
				if err != nil {
					errs[k] = fmt.Errorf("%s / %s: %w", sc.Name, c.Name, err)
					return
				}
				rows[k].Result = res
				rows[k].Summary = Summarize(res)
			})
		}
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// WriteTable writes rows as a Markdown table.
func WriteTable(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| dialect | client | goodput/limit | throttles | bans | converge s | settle s | reconverge s | retries/ops | mean goodput/s |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		s := r.Summary
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d | %s | %s | %s | %.3f | %.1f |\n",
			r.Scenario, r.Contender, ratio(s.GoodputRatio, "%.3f"), pct(s.ThrottleRatio), s.Bans,
			seconds(s.ConvergeS), seconds(s.SettleS), seconds(s.ReconvergeS), s.RetryRatio, s.MeanGoodput)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func ratio(v float64, f string) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf(f, v)
}

func pct(v float64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", 100*v)
}

func seconds(s int) string {
	if s < 0 {
		return "never"
	}
	return fmt.Sprint(s)
}

// ParseScenario reads a scenario from YAML (JSON is YAML too), rejecting
// unknown fields, and fills and validates it. Durations are Go durations
// ("15s", "20ms").
func ParseScenario(b []byte) (Scenario, error) {
	var sc Scenario
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&sc); err != nil && !errors.Is(err, io.EOF) {
		return sc, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := sc.Fill(); err != nil {
		return sc, err
	}
	return sc, nil
}
