package dashboard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/store"
)

// Bounds of what a page shows.
const (
	nearShown      = 10
	hotShown       = 10
	recentShown    = 20
	listShown      = 100 // connectors, jobs
	tailShown      = 20  // runs, gaps
	transShown     = 50
	slotWindows    = 48
	outboundKeys   = 32
	outboundPoints = 360
)

func (d *Dashboard) gather(ctx context.Context, page string, q url.Values) (any, error) {
	switch page {
	case "":
		return d.overview(ctx)
	case "policies":
		return d.policiesPage(ctx, q)
	case "outbound":
		return d.outboundPage(), nil
	case "breakers":
		return d.breakersPage(ctx)
	case "leases":
		return d.leasesPage(ctx, q)
	case "slots":
		return d.slotsPage(ctx, q)
	case "jobs":
		return d.jobsPage(ctx)
	}
	return nil, fmt.Errorf("dashboard: no page %q", page)
}

// ratePolicies are the limiter's policies that take costs (not leases).
func (d *Dashboard) ratePolicies() []limiter.Policy {
	return slices.DeleteFunc(d.lim().Policies(), func(p limiter.Policy) bool { return p.Algorithm == store.Concurrency })
}

type overviewData struct {
	Store     string
	Healthy   bool
	Outage5m  int64
	Policies  []policyOverview
	Near      []nearRow
	LastHour  string
	NoTraffic bool
}

type policyOverview struct {
	Name, Algorithm, Outage   string
	Shadow                    bool
	Allowed, Denied, Shadowed int64
	OutageAnswers             int64
	Chart                     chart
}

type nearRow struct {
	Policy, Key      string
	Remaining, Limit int64
	ResetAfter       time.Duration
	Percent          int64 // remaining as a percentage of the limit
	Stale            string
}

func (d *Dashboard) overview(ctx context.Context) (*overviewData, error) {
	out := &overviewData{Store: d.cfg.StoreName, Healthy: true, NoTraffic: true}
	var near []NearKey
	for _, p := range d.ratePolicies() {
		pts := d.cfg.Recorder.Series(p.Name, time.Hour, time.Minute)
		po := policyOverview{Name: p.Name, Algorithm: p.Algorithm.String(), Outage: p.Outage.Mode.String(), Shadow: p.Shadow}
		ts := make([]time.Time, len(pts))
		a, de, s := make([]float64, len(pts)), make([]float64, len(pts)), make([]float64, len(pts))
		for i, pt := range pts {
			ts[i] = pt.Start
			a[i], de[i], s[i] = float64(pt.Allowed), float64(pt.Denied), float64(pt.ShadowDenied)
			po.Allowed += pt.Allowed
			po.Denied += pt.Denied
			po.Shadowed += pt.ShadowDenied
			po.OutageAnswers += pt.Outage
		}
		for _, pt := range d.cfg.Recorder.Series(p.Name, 5*time.Minute, BucketWidth) {
			out.Outage5m += pt.Outage
		}
		if po.Allowed+po.Denied+po.Shadowed > 0 {
			out.NoTraffic = false
		}
		po.Chart = newChart(fmt.Sprintf("Decisions per minute for policy %s over the last hour: %d allowed, %d denied, %d shadow-denied",
			p.Name, po.Allowed, po.Denied, po.Shadowed), ts,
			[]string{"allowed", "denied", "shadow-denied"}, []string{"a", "d", "s"}, [][]float64{a, de, s}, formatCount, true)
		out.Policies = append(out.Policies, po)
		near = append(near, d.cfg.Recorder.Nearest(p.Name, nearShown, 10*time.Minute)...)
	}
	out.Healthy = out.Outage5m == 0
	sortNear(near)
	if len(near) > nearShown {
		near = near[:nearShown]
	}
	var errs []error
	for _, k := range near {
		row := nearRow{Policy: k.Policy, Key: k.Key, Remaining: k.Remaining, Limit: k.Limit}
		// A take of cost 0 charges nothing and says where the key stands now.
		dec, err := d.lim().AllowN(ctx, k.Policy, k.Key, 0)
		if err != nil {
			errs = append(errs, err)
			row.Stale = "as last seen " + k.At.UTC().Format(time.TimeOnly) + " UTC (the store did not answer)"
		} else {
			row.Remaining, row.Limit, row.ResetAfter = dec.Remaining, dec.Limit, dec.ResetAfter
		}
		if row.Limit > 0 {
			row.Percent = row.Remaining * 100 / row.Limit
		}
		out.Near = append(out.Near, row)
	}
	slices.SortStableFunc(out.Near, func(a, b nearRow) int {
		return cmp.Compare(fraction(a.Remaining, a.Limit), fraction(b.Remaining, b.Limit))
	})
	return out, errors.Join(errs...)
}

// fraction is remaining over limit (1 without a limit), in floating point
// so that limits up to 2^53 never overflow a product.
func fraction(remaining, limit int64) float64 {
	if limit <= 0 {
		return 1
	}
	return float64(remaining) / float64(limit)
}

type policiesData struct {
	Policies []policyRow
	Names    []string
	Search   *keySearch
}

type policyRow struct {
	limiter.Policy
	Algorithm string
	Burst     int64
	Outage    string
	Hot       []HotKey
}

type keySearch struct {
	Policy, Key            string
	Err                    string
	Found                  bool
	Remaining, Limit       int64
	ResetAfter, RetryAfter time.Duration
	Recent                 []Decision
}

func (d *Dashboard) policiesPage(ctx context.Context, q url.Values) (*policiesData, error) {
	out := &policiesData{}
	for _, p := range d.lim().Policies() {
		row := policyRow{Policy: p, Algorithm: p.Algorithm.String(), Outage: p.Outage.Mode.String()}
		if p.Algorithm != store.Concurrency {
			row.Burst = p.Limit().Max()
			row.Hot = d.cfg.Recorder.Hottest(p.Name, hotShown)
			out.Names = append(out.Names, p.Name)
		}
		out.Policies = append(out.Policies, row)
	}
	key, policy := q.Get("key"), q.Get("policy")
	if key == "" && policy == "" {
		return out, nil
	}
	ks := &keySearch{Policy: policy, Key: key}
	out.Search = ks
	switch {
	case key == "":
		ks.Err = "key: type a key to look up"
	case !slices.Contains(out.Names, policy):
		ks.Err = fmt.Sprintf("policy: %q is not one of this server's rate policies", trunc(policy, 64))
	default:
		if err := store.CheckKey(key); err != nil {
			ks.Err = err.Error()
			return out, nil
		}
		dec, err := d.lim().AllowN(ctx, policy, key, 0)
		if err != nil {
			ks.Err = "the rate store did not answer: " + err.Error()
			return out, err
		}
		ks.Found, ks.Remaining, ks.Limit, ks.ResetAfter, ks.RetryAfter = true, dec.Remaining, dec.Limit, dec.ResetAfter, dec.RetryAfter
		ks.Recent = d.cfg.Recorder.Recent(policy, key, recentShown)
	}
	return out, nil
}

func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

type outboundData struct {
	Configured bool
	Snap       outbound.Snapshot
	Keys       []outboundKey
}

type outboundKey struct {
	outbound.KeySnapshot
	Chart chart
}

func (d *Dashboard) outboundPage() *outboundData {
	out := &outboundData{Configured: d.cfg.Outbound != nil}
	if !out.Configured {
		return out
	}
	out.Snap = d.sampleOutbound(false)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range out.Snap.Keys {
		ok := outboundKey{KeySnapshot: k}
		if r := d.samples[k.Key]; r != nil {
			ss := r.list()
			ts := make([]time.Time, len(ss))
			rate, hint := make([]float64, len(ss)), make([]float64, len(ss))
			for i, s := range ss {
				ts[i], rate[i], hint[i] = s.at, s.rate, s.hint
			}
			ok.Chart = newChart(fmt.Sprintf("Learned rate of %s over time, requests per second: now %s", k.Key, formatRate(k.Rate)),
				ts, []string{"learned rate", "provider's stated rate"}, []string{"r", "h"}, [][]float64{rate, hint}, formatRate, false)
		}
		out.Keys = append(out.Keys, ok)
	}
	return out
}

// sample is one outbound key's state at one time.
type sample struct {
	at         time.Time
	rate, hint float64
}

// sampleRing holds a key's latest outboundPoints samples.
type sampleRing struct {
	buf  [outboundPoints]sample
	n    int
	last time.Time
}

func (r *sampleRing) add(s sample) {
	r.buf[r.n%outboundPoints] = s
	r.n++
	r.last = s.at
}

func (r *sampleRing) list() []sample {
	k := min(r.n, outboundPoints)
	out := make([]sample, 0, k)
	for i := r.n - k; i < r.n; i++ {
		out = append(out, r.buf[i%outboundPoints])
	}
	return out
}

// sampleOutbound takes a snapshot and, unless one was taken within the
// last second (always when forced), records each key's rate.
func (d *Dashboard) sampleOutbound(force bool) outbound.Snapshot {
	snap := d.cfg.Outbound.Snapshot(outboundKeys)
	now := d.clk.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if !force && now.Sub(d.sampled) < time.Second {
		return snap
	}
	d.sampled = now
	for _, k := range snap.Keys {
		r := d.samples[k.Key]
		if r == nil {
			if len(d.samples) >= outboundKeys { // drop the longest idle key
				var idle string
				var at time.Time
				for key, s := range d.samples {
					if idle == "" || s.last.Before(at) {
						idle, at = key, s.last
					}
				}
				delete(d.samples, idle)
			}
			r = &sampleRing{}
			d.samples[k.Key] = r
		}
		r.add(sample{at: now, rate: k.Rate, hint: k.Hint})
	}
	return snap
}

type breakersData struct {
	HasOutbound bool
	Outbound    []outbound.KeySnapshot
	HasJobs     bool
	States      []store.BreakerTransition // the latest transition of each connector and key
	Transitions []store.BreakerTransition // newest first
	Err         string
}

func (d *Dashboard) breakersPage(ctx context.Context) (*breakersData, error) {
	out := &breakersData{HasOutbound: d.cfg.Outbound != nil, HasJobs: d.cfg.Jobs != nil}
	if out.HasOutbound {
		out.Outbound = d.sampleOutbound(false).Keys
	}
	if !out.HasJobs {
		return out, nil
	}
	// Newest first: the first row of each connector and key is its state.
	ts, err := d.cfg.Jobs.ListBreakerTransitions(ctx, store.ListParams{Limit: store.MaxListLimit})
	if err != nil {
		out.Err = "the job store did not answer: " + err.Error()
		return out, err
	}
	seen := map[[2]string]bool{}
	for _, t := range ts {
		if k := [2]string{t.ConnectorID, t.Key}; !seen[k] && len(out.States) < transShown {
			seen[k] = true
			out.States = append(out.States, t)
		}
		if len(out.Transitions) < transShown {
			out.Transitions = append(out.Transitions, t)
		}
	}
	return out, nil
}

type leasesData struct {
	Policies []string
	Keys     []leaseKeyRow
	Err      string
}

type leaseKeyRow struct {
	Policy, Key string
	Permits     int64
	TTL         time.Duration
	Refused     int
	Waiting     []Waiter
	Holders     []holderRow
	Err         string
}

type holderRow struct {
	HolderHash string
	Token      int64
	Expires    time.Time
}

func (d *Dashboard) leasesPage(ctx context.Context, q url.Values) (*leasesData, error) {
	out := &leasesData{}
	lp := map[string]limiter.Policy{}
	for _, p := range d.lim().Policies() {
		if p.Algorithm == store.Concurrency {
			out.Policies = append(out.Policies, p.Name)
			lp[p.Name] = p
		}
	}
	keys := d.cfg.Recorder.LeaseKeys()
	if key, policy := q.Get("key"), q.Get("policy"); key != "" || policy != "" {
		if _, ok := lp[policy]; !ok {
			out.Err = fmt.Sprintf("policy: %q is not one of this server's concurrency policies", trunc(policy, 64))
		} else if err := store.CheckKey(key); err != nil {
			out.Err = err.Error()
		} else if !slices.ContainsFunc(keys, func(k LeaseKey) bool { return k.Policy == policy && k.Key == key }) {
			keys = append([]LeaseKey{{Policy: policy, Key: key}}, keys...)
		}
	}
	var errs []error
	for _, k := range keys {
		p, ok := lp[k.Policy]
		if !ok {
			continue
		}
		row := leaseKeyRow{Policy: k.Policy, Key: k.Key, Permits: p.Permits, TTL: p.TTL, Refused: k.Refused, Waiting: k.Waiting}
		hs, err := d.lim().Holders(ctx, k.Policy, k.Key)
		if err != nil {
			row.Err = "the lease store did not answer: " + err.Error()
			errs = append(errs, err)
		}
		for _, h := range hs {
			row.Holders = append(row.Holders, holderRow{HolderHash: holderHash(h.Holder), Token: h.Token,
				Expires: time.UnixMicro(h.Expires).UTC()})
		}
		out.Keys = append(out.Keys, row)
	}
	return out, errors.Join(errs...)
}

type slotsData struct {
	Configured bool
	Configs    []slotConfigView
	Err        string
}

type slotConfigView struct {
	Name    string
	Cfg     store.SlotConfig
	Cells   []slotCell
	Used    int64
	Closed  int
	Err     string
	Caption string
}

type slotCell struct {
	Start  time.Time
	Count  int64
	Max    int64
	Closed bool
	Level  int // 0..5, occupancy in fifths
}

func (d *Dashboard) slotsPage(ctx context.Context, q url.Values) (*slotsData, error) {
	out := &slotsData{Configured: d.cfg.Slots != nil}
	if !out.Configured {
		return out, nil
	}
	names := d.cfg.Recorder.SlotConfigs()
	if n := q.Get("config"); n != "" {
		if err := store.CheckIDMax("config name", n, store.MaxConfigNameLen); err != nil {
			out.Err = err.Error()
		} else {
			names = append([]string{n}, slices.DeleteFunc(names, func(s string) bool { return s == n })...)
		}
	}
	now := d.clk.Now()
	var errs []error
	for _, n := range names {
		v := slotConfigView{Name: n}
		cfg, err := d.cfg.Slots.Config(ctx, n)
		if err != nil {
			if errors.Is(err, store.ErrConfigNotFound) {
				v.Err = "no active config of this name"
			} else {
				v.Err = "the slot store did not answer: " + err.Error()
				errs = append(errs, err)
			}
			out.Configs = append(out.Configs, v)
			continue
		}
		v.Cfg = cfg
		size := cfg.WindowSize
		if size <= 0 {
			continue
		}
		from := time.UnixMicro(now.UnixMicro() / size.Microseconds() * size.Microseconds())
		to := from.Add(slotWindows * size)
		ws, err := d.cfg.Slots.Windows(ctx, n, from, to, slotWindows)
		if err != nil {
			v.Err = "the slot store did not answer: " + err.Error()
			errs = append(errs, err)
			out.Configs = append(out.Configs, v)
			continue
		}
		byStart := map[int64]store.SlotWindow{}
		for _, w := range ws {
			byStart[w.Start.UnixMicro()] = w
		}
		for i := range slotWindows {
			start := from.Add(time.Duration(i) * size)
			w := byStart[start.UnixMicro()]
			c := slotCell{Start: start.UTC(), Count: w.Count, Max: cfg.MaxPerWindow, Closed: w.Closed}
			if cfg.MaxPerWindow > 0 {
				c.Level = int(min(5, (w.Count*5+cfg.MaxPerWindow-1)/cfg.MaxPerWindow))
			}
			if c.Closed {
				v.Closed++
			}
			v.Used += w.Count
			v.Cells = append(v.Cells, c)
		}
		v.Caption = fmt.Sprintf("The next %d windows of %s from %s UTC: %d events, %d windows closed", slotWindows, size,
			from.UTC().Format(time.TimeOnly), v.Used, v.Closed)
		out.Configs = append(out.Configs, v)
	}
	return out, errors.Join(errs...)
}

type jobsData struct {
	Configured bool
	Connectors []store.Connector
	Jobs       []store.Job
	Parked     []store.Job
	Runs       []store.RunRecord
	Gaps       []store.GapRecord
	Now        time.Time
	Err        string
}

func (d *Dashboard) jobsPage(ctx context.Context) (*jobsData, error) {
	out := &jobsData{Configured: d.cfg.Jobs != nil, Now: d.clk.Now()}
	if !out.Configured {
		return out, nil
	}
	var err error
	fail := func(e error) (*jobsData, error) {
		out.Err = "the job store did not answer: " + e.Error()
		return out, e
	}
	if out.Connectors, err = d.cfg.Jobs.ListConnectors(ctx, store.ListParams{Limit: listShown}); err != nil {
		return fail(err)
	}
	if out.Jobs, err = d.cfg.Jobs.ListJobs(ctx, store.ListParams{Limit: listShown}); err != nil {
		return fail(err)
	}
	for _, j := range out.Jobs {
		if j.ParkedReason != "" || j.ParkedUntil.After(out.Now) {
			out.Parked = append(out.Parked, j)
		}
	}
	// Runs and gaps are listed newest first.
	if out.Runs, err = d.cfg.Jobs.ListRuns(ctx, store.ListParams{Limit: tailShown}); err != nil {
		return fail(err)
	}
	if out.Gaps, err = d.cfg.Jobs.ListGaps(ctx, store.ListParams{Limit: tailShown}); err != nil {
		return fail(err)
	}
	return out, nil
}
