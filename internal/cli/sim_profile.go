package cli

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicerl/sluice/provider"
	"github.com/sluicerl/sluice/sim"
)

// simProfileURLs is what the workers request from each simulated provider.
var simProfileURLs = map[string]string{
	"shopify-graphql": "https://demo-shop.myshopify.com/admin/api/2026-01/graphql.json",
	"shopify-rest":    "https://demo-shop.myshopify.com/admin/api/2026-01/products.json",
	"binance":         "https://api.binance.com/api/v3/klines",
	"github":          "https://api.github.com/repos/o/r",
}

// runSimProfile is sluice sim --profile NAME: the workers apply the named
// provider profile (package provider) against that provider's simulator
// (sim.ProfileProvider, or --target), sharing the --state store.
func runSimProfile(cmd *cobra.Command, opts *Options, f *simFlags) error {
	if !slices.Contains(sim.Profiles(), f.profile) && f.target == "" {
		return usagef("--profile %q has no simulator (have %s); give --target URL to drive a real endpoint", f.profile, strings.Join(sim.Profiles(), ", "))
	}
	if f.report || f.serve != "" || f.scenario != "" {
		return usagef("--profile cannot be combined with --report, --serve or --scenario")
	}
	set, err := provider.Embedded()
	if err != nil {
		return err
	}
	prof, err := set.Lookup(f.profile)
	if err != nil {
		return usageError{err}
	}
	ctx := cmd.Context()
	st, err := openState(ctx, "--state", f.state, nil, f.timeout, nil, nil, 0)
	if err != nil {
		return err
	}
	defer st.close()
	prefix := f.prefix
	if prefix == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		prefix = "sluice-sim:" + hex.EncodeToString(b[:]) + ":"
	}
	url, base, limit := f.target, http.RoundTripper(http.DefaultTransport), f.limit
	var sp *sim.ProfileProvider
	var cost int64
	if f.target == "" {
		cfg := sim.ProfileConfig{Profile: f.profile, Latency: f.latency}
		switch f.profile {
		case "binance":
			cfg.Capacity, cfg.Window = 600, 10*time.Second // several windows in a short run
		case "github":
			cfg.Capacity, cfg.Window = 300, 10*time.Second
		case "shopify-graphql":
			cfg.Rate = 100
		}
		if sp, err = sim.NewProfileProvider(cfg); err != nil {
			return usageError{err}
		}
		url, base = simProfileURLs[f.profile], sim.HandlerTransport{Handler: sp}
		cost = sp.Config().RequestedCost
		limit = sp.Limit(2) // klines weigh 2
		if f.profile != "shopify-graphql" && f.profile != "shopify-rest" {
			// The simulator's windows are shortened: so is the profile.
			prof = shortened(prof, cfg.Capacity, cfg.Window)
		}
	}
	fmt.Fprintf(opts.Stderr, "running %d workers in %d processes with profile %s for %v...\n", f.workers, f.processes, prof.Name, f.duration)
	res, err := sim.Run(ctx, sim.Config{
		Workers: f.workers, Processes: f.processes, Duration: f.duration, URL: url, Base: base,
		Limit: func(time.Duration) float64 { return limit },
		NewClient: func(i int, base http.RoundTripper) (sim.Client, error) {
			rt, err := provider.NewRuntime(provider.Config{Profile: prof, Store: st.store, Prefix: prefix})
			if err != nil {
				return sim.Client{}, err
			}
			return sim.Client{Transport: &provider.Transport{Runtime: rt, Base: base, Cost: func(*http.Request) int64 { return cost }}}, nil
		},
	})
	if err != nil {
		return err
	}
	s := sim.Summarize(res)
	// The ratios count the steady seconds only: none in a run no longer
	// than the settling allowance, where Summarize gives -1.
	ratios := fmt.Sprintf("goodput/limit %.3f, throttled %.2f%%", s.GoodputRatio, 100*s.ThrottleRatio)
	if s.GoodputRatio < 0 {
		ratios = fmt.Sprintf("goodput/limit n/a, throttled n/a (no steady second: the first %d s settle; run longer)", sim.SettleAllowance)
	}
	fmt.Fprintf(opts.Stdout, "profile %s: %s, bans %d, ops %d, retries %d\n", prof.Name, ratios, s.Bans, s.Ops, s.Retries)
	if sp != nil {
		ps := sp.Stats()
		fmt.Fprintf(opts.Stdout, "provider: %d requests, %d admitted, %d throttled, %d banned, %d MAX_COST_EXCEEDED\n",
			ps.Requests, ps.Admitted, ps.Throttled, ps.Banned, ps.TooCostly)
	}
	return nil
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
