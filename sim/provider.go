package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicerl/sluice/clock"
)

// Dialect is how a simulated provider enforces and signals its limit. The
// zero value is RetryAfterSeconds.
type Dialect uint8

const (
	// RetryAfterSeconds answers 429 with Retry-After in delta-seconds.
	RetryAfterSeconds Dialect = iota
	// RetryAfterDate answers 429 with Retry-After as an HTTP-date.
	RetryAfterDate
	// Bare429 answers 429 with no header saying when to come back.
	Bare429
	// Unavailable answers 503 with no Retry-After.
	Unavailable
	// Slowdown never refuses: requests queue behind a server that serves
	// Limit per second, so latency grows with load.
	Slowdown
	// Ban answers 429 with Retry-After, and after BanAfter violations
	// within BanWindow bans the client: 418 with Retry-After for BanFor,
	// doubling with every ban. A violation is a request refused before
	// the latest Retry-After has passed: a client that fails to back off.
	Ban
	// CostBucket is a Shopify-like GraphQL cost bucket: every query
	// reserves RequestedCost points, is charged ActualCost (the difference
	// is refunded), and a query that does not fit gets an HTTP 200 whose
	// body carries errors[].extensions.code THROTTLED; extensions.cost
	// reports the bucket's throttleStatus.
	CostBucket
	// WeightWindow is an exchange-like fixed window of weight, aligned to
	// the clock (a minute's window resets on the minute): every request
	// weighs Weight, X-MBX-USED-WEIGHT-<window> reports the weight used in
	// the current window, a request over the window's budget gets 429 with
	// Retry-After, and repeated violations escalate to 418 bans as in Ban.
	WeightWindow
	// IETF states its policy on every answer, as the IETF draft
	// (draft-ietf-httpapi-ratelimit-headers) describes: a fixed window of
	// Window (aligned to the clock) holding the limit x Window requests,
	// RateLimit-Policy: "default";q=<quota>;w=<window seconds> and
	// RateLimit: "default";r=<remaining>;t=<seconds to the reset>; a
	// request over the quota gets 429 with Retry-After (whole seconds,
	// rounded up) and r=0.
	IETF
	// ShopifyREST is Shopify's REST Admin API as its documentation
	// describes it: a leaky bucket of BucketSize requests that leaks at
	// the limit a second (standard plans: 40 leaking 2 a second); every
	// answer, 200 or 429, carries X-Shopify-Shop-Api-Call-Limit:
	// <used>/<bucket size>, and a request that finds the bucket full is
	// refused with 429 and Retry-After: 2.0, whatever the level.
	ShopifyREST
)

var dialectNames = [...]string{
	RetryAfterSeconds: "retry-after-seconds",
	RetryAfterDate:    "retry-after-date",
	Bare429:           "bare-429",
	Unavailable:       "503",
	Slowdown:          "slowdown",
	Ban:               "ban",
	CostBucket:        "cost-bucket",
	WeightWindow:      "weight-window",
	IETF:              "ietf",
	ShopifyREST:       "shopify-rest",
}

// Dialects lists every dialect in declaration order.
func Dialects() []Dialect {
	d := make([]Dialect, len(dialectNames))
	for i := range d {
		d[i] = Dialect(i)
	}
	return d
}

// TokenBucket reports whether d answers from a token bucket at the hidden
// limit (retry-after-seconds, retry-after-date, bare-429, 503, ban): the
// dialects ProviderConfig.FixedWindow turns into windows.
func (d Dialect) TokenBucket() bool {
	switch d {
	case RetryAfterSeconds, RetryAfterDate, Bare429, Unavailable, Ban:
		return true
	}
	return false
}

// DelaySeconds reports whether the dialect refuses with a Retry-After in
// delay-seconds (retry-after-seconds, ban): the dialects
// ProviderConfig.RetryAfterMillis sends to the millisecond.
func (d Dialect) DelaySeconds() bool {
	switch d {
	case RetryAfterSeconds, Ban:
		return true
	}
	return false
}

// String returns the dialect's name as ParseDialect reads it.
func (d Dialect) String() string {
	if int(d) < len(dialectNames) {
		return dialectNames[d]
	}
	return fmt.Sprintf("dialect(%d)", uint8(d))
}

// ParseDialect parses a dialect name (see Dialect.String).
func ParseDialect(s string) (Dialect, error) {
	for i, n := range dialectNames {
		if n == s {
			return Dialect(i), nil
		}
	}
	return 0, fmt.Errorf("sim: unknown dialect %q (want one of %s)", s, strings.Join(dialectNames[:], ", "))
}

// MarshalText implements encoding.TextMarshaler.
func (d Dialect) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Dialect) UnmarshalText(b []byte) error {
	v, err := ParseDialect(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// Change sets the hidden limit to Limit requests per second from At after
// the provider started. A plain value.
type Change struct {
	At    time.Duration `json:"at" yaml:"at"`
	Limit float64       `json:"limit" yaml:"limit"`
}

// ErrInvalidConfig: a provider or scenario setting is out of range; the
// wrapped message names it.
var ErrInvalidConfig = errors.New("sim: invalid config")

// ProviderConfig configures a Provider. The zero value is a provider of
// RetryAfterSeconds at 50 requests per second on the real clock.
type ProviderConfig struct {
	Dialect Dialect `json:"dialect" yaml:"dialect"`
	// Limit is the hidden limit in requests per second at the start. Zero
	// means 50.
	Limit float64 `json:"limit" yaml:"limit"`
	// Changes move the hidden limit mid-run, in order of At.
	Changes []Change `json:"changes,omitempty" yaml:"changes"`
	// Burst is how many requests above the steady rate the provider lets
	// through at once, as seconds of the limit. Zero means 0.1 s (and at
	// least one request).
	Burst time.Duration `json:"burst,omitempty" yaml:"burst"`
	// FixedWindow makes a token-bucket dialect (retry-after-seconds,
	// retry-after-date, bare-429, 503, ban) count requests in fixed
	// windows of Window aligned to the clock instead, as many providers
	// do: each window holds the limit x Window requests (at least one),
	// and one over it is refused as the dialect refuses, its Retry-After
	// (where the dialect sends one) the time to the window's end. Burst
	// does not apply.
	FixedWindow bool `json:"fixed_window,omitempty" yaml:"fixed_window"`
	// RetryAfterMillis sends Retry-After as decimal seconds to the
	// millisecond, the exact wait (at least 0.001), instead of whole
	// seconds rounded up, as providers that state when their next token
	// comes do (retry-after-seconds and ban: an HTTP-date has whole
	// seconds, and 503 sends none). A ban's violations then count until
	// that time.
	RetryAfterMillis bool `json:"retry_after_millis,omitempty" yaml:"retry_after_millis"`
	// Latency is every response's base service time. Zero means none;
	// Slowdown adds its queueing delay on top.
	Latency time.Duration `json:"latency,omitempty" yaml:"latency"`
	// Jitter adds to every response's service time a random extra,
	// uniform in [0, Jitter), drawn afresh for each: real providers'
	// answers vary with their own work and the network, and a client
	// must not read that variance as a queue. Zero means none.
	Jitter time.Duration `json:"jitter,omitempty" yaml:"jitter"`
	// BanAfter is how many violations (requests refused before the latest
	// Retry-After passed) within BanWindow earn a ban (Ban and
	// WeightWindow). Zero means 5.
	BanAfter int `json:"ban_after,omitempty" yaml:"ban_after"`
	// BanWindow: zero means 10 s.
	BanWindow time.Duration `json:"ban_window,omitempty" yaml:"ban_window"`
	// BanOnRefusals counts every refusal towards BanAfter, not only those
	// of a client that came back before the latest Retry-After had passed:
	// a provider that bans after N throttles in BanWindow, whatever the
	// client did.
	BanOnRefusals bool `json:"ban_on_refusals,omitempty" yaml:"ban_on_refusals"`
	// BanFor is the first ban's length; every later ban doubles it. Zero
	// means 2 s.
	BanFor time.Duration `json:"ban_for,omitempty" yaml:"ban_for"`
	// RequestedCost and ActualCost are CostBucket's per-query points. Zero
	// means 10 and 5: the hidden limit in queries per second is the restore
	// rate divided by ActualCost.
	RequestedCost int `json:"requested_cost,omitempty" yaml:"requested_cost"`
	ActualCost    int `json:"actual_cost,omitempty" yaml:"actual_cost"`
	// Weight is WeightWindow's weight per request; Window its length. Zero
	// means 2 and 1 s.
	Weight int           `json:"weight,omitempty" yaml:"weight"`
	Window time.Duration `json:"window,omitempty" yaml:"window"`
	// BucketSize is ShopifyREST's bucket in requests (Burst does not
	// apply to it). Zero means 40, Shopify's standard plans' bucket.
	BucketSize int `json:"bucket_size,omitempty" yaml:"bucket_size"`
	// Clock times the provider. Nil means the real clock.
	Clock clock.Clock `json:"-" yaml:"-"`
}

func (c *ProviderConfig) defaults() error {
	if c.Limit == 0 {
		c.Limit = 50
	}
	if !(c.Limit > 0) || math.IsInf(c.Limit, 0) {
		return fmt.Errorf("%w: limit must be a positive number of requests per second, got %v", ErrInvalidConfig, c.Limit)
	}
	if int(c.Dialect) >= len(dialectNames) {
		return fmt.Errorf("%w: unknown dialect %d", ErrInvalidConfig, c.Dialect)
	}
	for i, ch := range c.Changes {
		if !(ch.Limit > 0) || math.IsInf(ch.Limit, 0) {
			return fmt.Errorf("%w: changes[%d]: limit must be positive, got %v", ErrInvalidConfig, i, ch.Limit)
		}
		if ch.At < 0 || (i > 0 && ch.At < c.Changes[i-1].At) {
			return fmt.Errorf("%w: changes[%d]: at must be >= 0 and in order, got %v", ErrInvalidConfig, i, ch.At)
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
		def  time.Duration
		p    *time.Duration
	}{
		{"burst", c.Burst, 100 * time.Millisecond, &c.Burst},
		{"ban_window", c.BanWindow, 10 * time.Second, &c.BanWindow},
		{"ban_for", c.BanFor, 2 * time.Second, &c.BanFor},
		{"window", c.Window, time.Second, &c.Window},
	} {
		if f.v < 0 {
			return fmt.Errorf("%w: %s must be >= 0, got %v", ErrInvalidConfig, f.name, f.v)
		}
		if f.v == 0 {
			*f.p = f.def
		}
	}
	if c.Latency < 0 {
		return fmt.Errorf("%w: latency must be >= 0, got %v", ErrInvalidConfig, c.Latency)
	}
	if c.Jitter < 0 {
		return fmt.Errorf("%w: jitter must be >= 0, got %v", ErrInvalidConfig, c.Jitter)
	}
	for _, f := range []struct {
		name string
		p    *int
		def  int
	}{
		{"ban_after", &c.BanAfter, 5},
		{"requested_cost", &c.RequestedCost, 10},
		{"actual_cost", &c.ActualCost, 5},
		{"weight", &c.Weight, 2},
		{"bucket_size", &c.BucketSize, 40},
	} {
		if *f.p < 0 {
			return fmt.Errorf("%w: %s must be >= 0, got %d", ErrInvalidConfig, f.name, *f.p)
		}
		if *f.p == 0 {
			*f.p = f.def
		}
	}
	if c.RetryAfterMillis && !c.Dialect.DelaySeconds() {
		return fmt.Errorf("%w: retry_after_millis applies to retry-after-seconds and ban, not %s", ErrInvalidConfig, c.Dialect)
	}
	if c.FixedWindow && !c.Dialect.TokenBucket() {
		return fmt.Errorf("%w: fixed_window applies to retry-after-seconds, retry-after-date, bare-429, 503 and ban, not %s", ErrInvalidConfig, c.Dialect)
	}
	if c.ActualCost > c.RequestedCost {
		return fmt.Errorf("%w: actual_cost %d above requested_cost %d", ErrInvalidConfig, c.ActualCost, c.RequestedCost)
	}
	c.Clock = clock.Or(c.Clock)
	return nil
}

// ProviderStats counts what a Provider answered: a plain value, a copy.
type ProviderStats struct {
	Requests  int64 // every request
	Admitted  int64 // served within the limit
	Throttled int64 // refused with a throttle signal (429, 503, THROTTLED)
	Banned    int64 // answered 418
	Bans      int64 // bans imposed
}

// Provider is a simulated provider: an http.Handler with a hidden policy.
// It is safe for concurrent use. Build it with NewProvider.
type Provider struct {
	cfg   ProviderConfig
	start time.Time

	mu sync.Mutex
	// token bucket (all but Slowdown, CostBucket and WeightWindow)
	tokens float64
	last   time.Time
	// Slowdown: when the server is next free
	nextFree time.Time
	// CostBucket: points available
	points float64
	// ShopifyREST: requests in the bucket
	level float64
	// WeightWindow
	winStart time.Time
	used     int
	// bans
	violations  []time.Time
	backoffTill time.Time // the latest Retry-After sent ends then
	bannedTill  time.Time
	banFor      time.Duration

	// Jitter's draws (seeded, so that a run's draws repeat)
	rng *rand.Rand

	requests, admitted, throttled, banned, bans atomic.Int64
}

// NewProvider validates cfg and returns a provider whose clock starts now.
func NewProvider(cfg ProviderConfig) (*Provider, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	cfg.Changes = slices.Clone(cfg.Changes)
	now := cfg.Clock.Now()
	p := &Provider{cfg: cfg, start: now, last: now, nextFree: now, winStart: now, banFor: cfg.BanFor,
		rng: rand.New(rand.NewPCG(1, uint64(cfg.Dialect)))}
	p.tokens = p.burst(cfg.Limit)
	p.points = p.maxPoints(cfg.Limit)
	return p, nil
}

// Config returns the provider's configuration with defaults applied.
func (p *Provider) Config() ProviderConfig { return p.cfg }

// Start returns the time the provider's schedule counts from.
func (p *Provider) Start() time.Time { return p.start }

// LimitAt returns the hidden limit in requests per second at elapsed time
// d after Start.
func (p *Provider) LimitAt(d time.Duration) float64 { return LimitAt(p.cfg.Limit, p.cfg.Changes, d) }

// LimitAt returns the limit at elapsed time d of a schedule that starts at
// base and follows changes (in order of At).
func LimitAt(base float64, changes []Change, d time.Duration) float64 {
	l := base
	for _, c := range changes {
		if d < c.At {
			break
		}
		l = c.Limit
	}
	return l
}

// Stats returns the provider's counters.
func (p *Provider) Stats() ProviderStats {
	return ProviderStats{
		Requests: p.requests.Load(), Admitted: p.admitted.Load(), Throttled: p.throttled.Load(),
		Banned: p.banned.Load(), Bans: p.bans.Load(),
	}
}

func (p *Provider) burst(limit float64) float64 {
	return max(1, limit*p.cfg.Burst.Seconds())
}

// maxPoints is the cost bucket's maximumAvailable: Burst of restore, and
// at least one query's requested cost.
func (p *Provider) maxPoints(limit float64) float64 {
	return max(float64(p.cfg.RequestedCost), limit*float64(p.cfg.ActualCost)*p.cfg.Burst.Seconds())
}

// outcome is what one request gets.
type outcome struct {
	status     int
	retryAfter time.Duration // > 0: send Retry-After
	delay      time.Duration // service time before answering
	throttled  bool
	banned     bool
	cost       *costReport
	usedWeight int
	// IETF: the window's quota (0: not IETF), what remains, and the time
	// to its reset.
	quota, remaining int
	reset            time.Duration
	// ShopifyREST: the bucket's level after the request (0: not
	// ShopifyREST) and size.
	callLimit, bucketSize int
}

type costReport struct {
	requested, actual        int
	maxAvail, avail, restore float64
	throttled                bool
}

// decide applies the hidden policy to one request at now.
func (p *Provider) decide(now time.Time) outcome {
	p.mu.Lock()
	defer p.mu.Unlock()
	limit := p.LimitAt(now.Sub(p.start))
	if now.Before(p.bannedTill) {
		return outcome{status: http.StatusTeapot, retryAfter: p.bannedTill.Sub(now), banned: true}
	}
	switch p.cfg.Dialect {
	case Slowdown:
		at := now
		if p.nextFree.After(at) {
			at = p.nextFree
		}
		p.nextFree = at.Add(time.Duration(float64(time.Second) / limit))
		return outcome{status: http.StatusOK, delay: at.Sub(now)}
	case CostBucket:
		return p.decideCost(now, limit)
	case WeightWindow:
		return p.decideWeight(now, limit)
	case IETF:
		return p.decideIETF(now, limit)
	case ShopifyREST:
		return p.decideShopifyREST(now, limit)
	}
	if p.cfg.FixedWindow {
		p.align(now)
		if p.used < max(1, int(math.Round(limit*p.cfg.Window.Seconds()))) {
			p.used++
			return outcome{status: http.StatusOK}
		}
		return p.refuse(now, max(p.winStart.Add(p.cfg.Window).Sub(now), time.Microsecond))
	}
	// Token bucket at the hidden limit.
	b := p.burst(limit)
	if dt := now.Sub(p.last).Seconds(); dt > 0 {
		p.tokens = min(b, p.tokens+dt*limit)
		p.last = now
	}
	p.tokens = min(p.tokens, b)
	if p.tokens >= 1 {
		p.tokens--
		return outcome{status: http.StatusOK}
	}
	// At least a microsecond: a bucket a hair under one token (0.9999...)
	// would otherwise round the wait to 0 and send no Retry-After at all,
	// which a provider of these dialects never does.
	return p.refuse(now, max(time.Duration((1-p.tokens)/limit*float64(time.Second)), time.Microsecond))
}

// refuse answers a request of a token-bucket dialect refused for wait.
func (p *Provider) refuse(now time.Time, wait time.Duration) outcome {
	switch p.cfg.Dialect {
	case RetryAfterSeconds, RetryAfterDate:
		return outcome{status: http.StatusTooManyRequests, retryAfter: wait, throttled: true}
	case Bare429:
		return outcome{status: http.StatusTooManyRequests, throttled: true}
	case Unavailable:
		return outcome{status: http.StatusServiceUnavailable, throttled: true}
	default: // Ban
		return p.violate(now, wait)
	}
}

// violate answers a refused request: 429 with Retry-After. A request
// refused before an earlier Retry-After has passed is a violation (the
// client failed to back off); BanAfter violations within BanWindow earn a
// ban: 418 with Retry-After.
func (p *Provider) violate(now time.Time, wait time.Duration) outcome {
	if p.cfg.BanOnRefusals || now.Before(p.backoffTill) {
		cut := now.Add(-p.cfg.BanWindow)
		i := 0
		for i < len(p.violations) && !p.violations[i].After(cut) {
			i++
		}
		p.violations = append(p.violations[i:], now)
		if len(p.violations) >= p.cfg.BanAfter {
			p.violations = p.violations[:0]
			p.bannedTill = now.Add(p.banFor)
			d := p.banFor
			p.banFor *= 2
			p.bans.Add(1)
			return outcome{status: http.StatusTeapot, retryAfter: d, banned: true}
		}
	}
	// Retry-After is sent in whole seconds, rounded up (to the
	// millisecond with RetryAfterMillis).
	if till := now.Add(p.retryAfter(wait)); till.After(p.backoffTill) {
		p.backoffTill = till
	}
	return outcome{status: http.StatusTooManyRequests, retryAfter: wait, throttled: true}
}

func (p *Provider) decideCost(now time.Time, limit float64) outcome {
	restore := limit * float64(p.cfg.ActualCost)
	maxP := p.maxPoints(limit)
	if dt := now.Sub(p.last).Seconds(); dt > 0 {
		p.points = min(maxP, p.points+dt*restore)
		p.last = now
	}
	p.points = min(p.points, maxP)
	rep := &costReport{requested: p.cfg.RequestedCost, maxAvail: maxP, restore: restore}
	if p.points < float64(p.cfg.RequestedCost) {
		rep.avail, rep.throttled = p.points, true
		return outcome{status: http.StatusOK, throttled: true, cost: rep}
	}
	// Reserve the requested cost, then refund the difference to the actual.
	p.points -= float64(p.cfg.RequestedCost)
	p.points += float64(p.cfg.RequestedCost - p.cfg.ActualCost)
	rep.actual, rep.avail = p.cfg.ActualCost, p.points
	return outcome{status: http.StatusOK, cost: rep}
}

func (p *Provider) decideWeight(now time.Time, limit float64) outcome {
	win := p.cfg.Window
	p.align(now)
	budget := int(math.Round(limit * win.Seconds() * float64(p.cfg.Weight)))
	if p.used+p.cfg.Weight > budget {
		o := p.violate(now, p.winStart.Add(win).Sub(now))
		o.usedWeight = p.used
		return o
	}
	p.used += p.cfg.Weight
	return outcome{status: http.StatusOK, usedWeight: p.used}
}

// align moves the fixed window (WeightWindow, IETF) to the one now falls
// in. Windows are aligned to the clock, as an exchange's minute is a
// minute of the wall clock, not of the client's start.
func (p *Provider) align(now time.Time) {
	if ws := now.Truncate(p.cfg.Window); !ws.Equal(p.winStart) {
		p.winStart, p.used = ws, 0
	}
}

func (p *Provider) decideIETF(now time.Time, limit float64) outcome {
	p.align(now)
	quota := max(1, int(math.Round(limit*p.cfg.Window.Seconds())))
	o := outcome{status: http.StatusOK, quota: quota}
	reset := p.winStart.Add(p.cfg.Window).Sub(now)
	if p.used >= quota {
		o.status, o.throttled, o.retryAfter = http.StatusTooManyRequests, true, reset
	} else {
		p.used++
	}
	o.remaining, o.reset = quota-p.used, reset
	return o
}

// shopifyRetryAfter is the Retry-After Shopify's REST Admin API sends with
// every 429, written as Shopify writes it.
const shopifyRetryAfter = "2.0"

// decideShopifyREST applies the leaky bucket: it leaks at limit a second
// since the last request, and a request that fits adds one.
func (p *Provider) decideShopifyREST(now time.Time, limit float64) outcome {
	if dt := now.Sub(p.last).Seconds(); dt > 0 {
		p.level = max(0, p.level-dt*limit)
		p.last = now
	}
	size := p.cfg.BucketSize
	o := outcome{status: http.StatusOK, bucketSize: size}
	if p.level+1 > float64(size) {
		o.status, o.throttled = http.StatusTooManyRequests, true
	} else {
		p.level++
	}
	// The used count is whole: round up, so that a client never sees
	// more room than there is.
	o.callLimit = min(size, int(math.Ceil(p.level-1e-9)))
	return o
}

// weightHeader is the X-MBX-USED-WEIGHT header name for the window length.
func weightHeader(win time.Duration) string {
	switch {
	case win%(24*time.Hour) == 0:
		return fmt.Sprintf("X-Mbx-Used-Weight-%dD", win/(24*time.Hour))
	case win%time.Hour == 0:
		return fmt.Sprintf("X-Mbx-Used-Weight-%dH", win/time.Hour)
	case win%time.Minute == 0:
		return fmt.Sprintf("X-Mbx-Used-Weight-%dM", win/time.Minute)
	}
	return fmt.Sprintf("X-Mbx-Used-Weight-%dS", max(1, int(win/time.Second)))
}

// ServeHTTP answers one request under the hidden policy, after the service
// time (Latency, plus the queueing delay for Slowdown) has passed on the
// provider's clock or the request's context is done.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := p.cfg.Clock.Now()
	o := p.decide(now)
	p.requests.Add(1)
	switch {
	case o.banned:
		p.banned.Add(1)
	case o.throttled:
		p.throttled.Add(1)
	default:
		p.admitted.Add(1)
	}
	if d := o.delay + p.cfg.Latency + p.jitter(); d > 0 {
		t := p.cfg.Clock.NewTimer(d)
		select {
		case <-t.C():
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	h := w.Header()
	if o.bucketSize > 0 {
		h.Set("X-Shopify-Shop-Api-Call-Limit", fmt.Sprintf("%d/%d", o.callLimit, o.bucketSize))
		if o.throttled {
			h.Set("Retry-After", shopifyRetryAfter)
		}
	}
	if o.retryAfter > 0 {
		if p.cfg.Dialect == RetryAfterDate {
			// HTTP-dates have whole seconds: round up so that a client
			// honouring it never comes back early.
			h.Set("Retry-After", now.Add(o.retryAfter+time.Second-1).Truncate(time.Second).UTC().Format(http.TimeFormat))
		} else if p.cfg.RetryAfterMillis && !o.banned {
			h.Set("Retry-After", strconv.FormatFloat(p.retryAfter(o.retryAfter).Seconds(), 'f', 3, 64))
		} else {
			h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(o.retryAfter.Seconds())), 10))
		}
	}
	if p.cfg.Dialect == WeightWindow {
		h.Set(weightHeader(p.cfg.Window), strconv.Itoa(o.usedWeight))
	}
	if o.quota > 0 {
		// The draft's delta-seconds are whole: t rounds up, so that a
		// client never comes back before the reset.
		h.Set("RateLimit-Policy", fmt.Sprintf(`"default";q=%d;w=%d`, o.quota, max(1, int64(math.Ceil(p.cfg.Window.Seconds())))))
		h.Set("RateLimit", fmt.Sprintf(`"default";r=%d;t=%d`, o.remaining, int64(math.Ceil(o.reset.Seconds()))))
	}
	h.Set("Content-Type", "application/json")
	if o.cost != nil {
		w.WriteHeader(o.status)
		_ = json.NewEncoder(w).Encode(costBody(o.cost))
		return
	}
	w.WriteHeader(o.status)
	switch {
	case o.banned:
		_, _ = w.Write([]byte(`{"code":-1003,"msg":"banned"}` + "\n"))
	case o.throttled && o.bucketSize > 0:
		_, _ = w.Write([]byte(`{"errors":"Exceeded calls per second for api client. Reduce request rates to resume uninterrupted service."}` + "\n"))
	case o.throttled:
		_, _ = w.Write([]byte(`{"error":"too many requests"}` + "\n"))
	default:
		_, _ = w.Write([]byte(`{"ok":true}` + "\n"))
	}
}

func costBody(c *costReport) map[string]any {
	var actual any
	if !c.throttled {
		actual = c.actual
	}
	body := map[string]any{
		"extensions": map[string]any{"cost": map[string]any{
			"requestedQueryCost": c.requested,
			"actualQueryCost":    actual,
			"throttleStatus": map[string]any{
				"maximumAvailable":   c.maxAvail,
				"currentlyAvailable": math.Floor(c.avail),
				"restoreRate":        c.restore,
			},
		}},
	}
	if c.throttled {
		body["errors"] = []any{map[string]any{
			"message":    "Throttled",
			"extensions": map[string]any{"code": "THROTTLED"},
		}}
	} else {
		body["data"] = map[string]any{"shop": map[string]any{"name": "sim"}}
	}
	return body
}

// retryAfter is the wait a refusal's Retry-After states: whole seconds
// rounded up, or with RetryAfterMillis milliseconds rounded up (at least
// one), so that a client honouring it never comes back early.
// jitter draws one response's extra service time, uniform in [0, Jitter).
func (p *Provider) jitter() time.Duration {
	if p.cfg.Jitter <= 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Duration(p.rng.Int64N(int64(p.cfg.Jitter)))
}

func (p *Provider) retryAfter(wait time.Duration) time.Duration {
	if p.cfg.RetryAfterMillis {
		return max(time.Duration(math.Ceil(float64(wait)/float64(time.Millisecond)))*time.Millisecond, time.Millisecond)
	}
	return time.Duration(math.Ceil(wait.Seconds())) * time.Second
}
