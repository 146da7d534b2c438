package cli

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicerl/sluice/provider"
	"github.com/sluicerl/sluice/sim"
	"github.com/sluicerl/sluice/store"
)

// simProfileURLs is what the workers request from each simulated provider.
var simProfileURLs = map[string]string{
	"shopify-graphql": "https://demo-shop.myshopify.com/admin/api/2026-01/graphql.json",
	"shopify-rest":    "https://demo-shop.myshopify.com/admin/api/2026-01/products.json",
	"binance":         "https://api.binance.com/api/v3/klines",
	"github":          "https://api.github.com/repos/o/r",
}

// simProfileAll is --profile's value that runs every simulated profile in
// turn and prints them as one table.
const simProfileAll = "all"

// runSimProfile is sluice sim --profile NAME: the workers apply the named
// provider profile (package provider) against that provider's simulator
// (sim.ProfileProvider, or --target), sharing the --state store. With
// --profile all, every profile of sim.Profiles runs in turn (each for
// --duration) and the results print as one table.
func runSimProfile(cmd *cobra.Command, opts *Options, f *simFlags) error {
	all := f.profile == simProfileAll
	if !all && !slices.Contains(sim.Profiles(), f.profile) && f.target == "" {
		return usagef("--profile %q has no simulator (have %s, or %s); give --target URL to drive a real endpoint", f.profile, strings.Join(sim.Profiles(), ", "), simProfileAll)
	}
	if f.report || f.serve != "" || f.scenario != "" {
		return usagef("--profile cannot be combined with --report, --serve or --scenario")
	}
	if all && f.target != "" {
		return usagef("--profile %s runs the simulators; it cannot be combined with --target", simProfileAll)
	}
	set, err := provider.Embedded()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	st, err := openState(ctx, "--state", f.state, nil, f.timeout, nil, nil, 0)
	if err != nil {
		return err
	}
	defer st.close()
	names := []string{f.profile}
	if all {
		names = sim.Profiles()
	}
	var rows []simProfileRow
	for _, name := range names {
		prof, err := set.Lookup(name)
		if err != nil {
			return usageError{err}
		}
		row, err := runOneSimProfile(cmd, opts, f, st.store, prof)
		if err != nil {
			return err
		}
		if !all {
			fmt.Fprintf(opts.Stdout, "profile %s: %s, bans %d, ops %d, retries %d\n", prof.Name, row.ratios(), row.s.Bans, row.s.Ops, row.s.Retries)
			if row.sp != nil {
				ps := row.sp.Stats()
				fmt.Fprintf(opts.Stdout, "provider: %d requests, %d admitted, %d throttled, %d banned, %d MAX_COST_EXCEEDED\n",
					ps.Requests, ps.Admitted, ps.Throttled, ps.Banned, ps.TooCostly)
			}
			return nil
		}
		rows = append(rows, row)
	}
	fmt.Fprintf(opts.Stdout, "%d workers in %d processes, state %s, %v per profile\n\n", f.workers, f.processes, strings.SplitN(f.state, ":", 2)[0], f.duration)
	tw := tabwriter.NewWriter(opts.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "profile\thidden limit/s\tgoodput/limit\tthrottled\tbans\tprovider refused\tMAX_COST_EXCEEDED")
	for _, r := range rows {
		ps := r.sp.Stats()
		gp, th := "n/a", "n/a"
		if r.s.GoodputRatio >= 0 {
			gp, th = fmt.Sprintf("%.3f", r.s.GoodputRatio), fmt.Sprintf("%.2f%%", 100*r.s.ThrottleRatio)
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%s\t%s\t%d\t%d\t%d\n", r.name, r.limit, gp, th, r.s.Bans, ps.Throttled+ps.Banned, ps.TooCostly)
	}
	return tw.Flush()
}

// simProfileRow is one profile's run.
type simProfileRow struct {
	name  string
	limit float64
	s     sim.Summary
	sp    *sim.ProfileProvider // nil with --target
}

func (r simProfileRow) ratios() string {
	// The ratios count the steady seconds only: none in a run no longer
	// than the settling allowance, where Summarize gives -1.
	if r.s.GoodputRatio < 0 {
		return fmt.Sprintf("goodput/limit n/a, throttled n/a (no steady second: the first %d s settle; run longer)", sim.SettleAllowance)
	}
	return fmt.Sprintf("goodput/limit %.3f, throttled %.2f%%", r.s.GoodputRatio, 100*r.s.ThrottleRatio)
}

// runOneSimProfile runs the fleet with prof against its simulator (or
// --target).
func runOneSimProfile(cmd *cobra.Command, opts *Options, f *simFlags, st store.RateStore, prof *provider.Profile) (simProfileRow, error) {
	prefix := f.prefix
	if prefix == "" || f.profile == simProfileAll {
		var b [6]byte
		_, _ = rand.Read(b[:])
		prefix = cmp.Or(f.prefix, "sluice-sim:") + hex.EncodeToString(b[:]) + ":"
	}
	url, base, limit := f.target, http.RoundTripper(http.DefaultTransport), f.limit
	var sp *sim.ProfileProvider
	var cost int64
	if f.target == "" {
		cfg := sim.ProfileConfig{Profile: prof.Name, Latency: f.latency}
		switch prof.Name {
		case "binance":
			cfg.Capacity, cfg.Window = 600, 10*time.Second // several windows in a short run
		case "github":
			// Core shortened to 100 per 10 s (10 a second, below the
			// secondary 900 points a minute, so that both bind).
			cfg.Capacity, cfg.Window = 100, 10*time.Second
		case "shopify-graphql":
			cfg.Rate = 100
		}
		var err error
		if sp, err = sim.NewProfileProvider(cfg); err != nil {
			return simProfileRow{}, usageError{err}
		}
		url, base = simProfileURLs[prof.Name], sim.HandlerTransport{Handler: sp}
		cost = sp.Config().RequestedCost
		limit = sp.Limit(2) // klines weigh 2
		if prof.Name != "shopify-graphql" && prof.Name != "shopify-rest" {
			// The simulator's windows are shortened: so is the profile.
			prof = shortened(prof, cfg.Capacity, cfg.Window)
		}
	}
	fmt.Fprintf(opts.Stderr, "running %d workers in %d processes with profile %s for %v...\n", f.workers, f.processes, prof.Name, f.duration)
	res, err := sim.Run(cmd.Context(), sim.Config{
		Workers: f.workers, Processes: f.processes, Duration: f.duration, URL: url, Base: base,
		Limit: func(time.Duration) float64 { return limit },
		NewClient: func(i int, base http.RoundTripper) (sim.Client, error) {
			rt, err := provider.NewRuntime(provider.Config{Profile: prof, Store: st, Prefix: prefix})
			if err != nil {
				return sim.Client{}, err
			}
			return sim.Client{Transport: &provider.Transport{Runtime: rt, Base: base, Cost: func(*http.Request) int64 { return cost }}}, nil
		},
	})
	if err != nil {
		return simProfileRow{}, err
	}
	return simProfileRow{name: prof.Name, limit: limit, s: sim.Summarize(res), sp: sp}, nil
}

// shortened returns p with its first limit's window set to the
// simulator's, for short demo runs.
func shortened(p *provider.Profile, capacity int64, window time.Duration) *provider.Profile {
	q := *p
	q.Limits = slices.Clone(p.Limits)
	l := &q.Limits[0]
	l.Capacity, l.Window = capacity, window
	if l.Sync != nil {
		s := *l.Sync
		if s.Window > 0 {
			s.Window = window
		}
		l.Sync = &s
	}
	return &q
}
