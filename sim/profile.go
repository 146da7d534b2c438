package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicerl/sluice/clock"
)

// Profiles lists the providers a ProfileProvider simulates, by the name of
// the provider profile (package provider) a client applies to them.
func Profiles() []string {
	return []string{"shopify-graphql", "shopify-rest", "binance", "github"}
}

// ProfileConfig configures a ProfileProvider: a plain value; every zero
// field means the provider's documented default (shown per field).
//
// The simulators are written from the providers' public documentation,
// independently of the profiles (they share no table with package
// provider, so a mistake in a profile shows as throttling here):
//
//   - shopify-graphql: a leaky bucket of points per shop (the request's
//     host) of Capacity (1000) restoring Rate points a second (50). A query
//     costs its requested cost (the X-Sim-Query-Cost request header, else
//     RequestedCost, 100) to start and is charged its actual cost
//     (X-Sim-Actual-Cost, else ActualCost, 40); extensions.cost reports
//     both and the throttleStatus. A query that does not fit gets HTTP 200
//     with errors[].extensions.code THROTTLED and costs nothing; one above
//     MaxQueryCost (1000) gets MAX_COST_EXCEEDED.
//   - shopify-rest: a leaky bucket of Capacity (40) requests per shop
//     leaking Rate (2) a second, reported by X-Shopify-Shop-Api-Call-Limit;
//     a request that does not fit gets 429 with Retry-After "2.0".
//   - binance: REQUEST_WEIGHT per key (the request's host, standing for
//     the IP) in windows of Window (1 m) aligned to the clock, Capacity
//     (6000) weight each, reported by X-MBX-USED-WEIGHT-1M; POST
//     /api/v3/order also counts ORDERS, OrderCapacity (100) per 10 s,
//     reported by X-MBX-ORDER-COUNT-10S. Over a limit: 429 with
//     Retry-After until the window ends; a request that comes back before
//     a Retry-After passed is a violation, and BanAfter (5) violations
//     earn a 418 ban of BanFor (2 m), doubling with every ban.
//   - github (GitHub's documented REST and GraphQL limits, per token: the
//     Authorization header, else the host): primary limits per resource in
//     windows aligned to the clock, reported by x-ratelimit-limit,
//     -remaining, -used, -reset and -resource: core, Capacity (5000)
//     requests per Window (1 h); search (GET /search/...), SearchCapacity
//     (30) a minute; graphql (POST /graphql), GraphQLCapacity (5000)
//     points per Window, a query costing its X-Sim-Query-Cost (else 1).
//     Over a primary limit: 429 (403 with X-Sim-403) with
//     x-ratelimit-remaining 0. Secondary limits: at most MaxConcurrent
//     (100) requests in flight, SecondaryPoints (900) points in any
//     SecondaryWindow (1 min, rolling) for REST (GET, HEAD and OPTIONS 1
//     point, other methods 5) and SecondaryGraphQLPoints (2000) for
//     GraphQL (a query 1, a mutation, X-Sim-Mutation, 5). Over a secondary
//     limit: 403 with retry-after 60 ("You have exceeded a secondary rate
//     limit"). A request refused before an earlier refusal's retry-after
//     (or reset) passed is a violation; BanAfter of them within a minute
//     ban the token for BanFor (403 without retry-after, counted Banned).
type ProfileConfig struct {
	Profile       string
	Capacity      int64
	Rate          float64
	Window        time.Duration
	OrderCapacity int64
	RequestedCost int64
	ActualCost    int64
	MaxQueryCost  int64
	BanAfter      int
	BanFor        time.Duration
	// GitHub's other limits (see above).
	SearchCapacity, GraphQLCapacity         int64
	SecondaryPoints, SecondaryGraphQLPoints int64
	SecondaryWindow                         time.Duration
	MaxConcurrent                           int64
	// Latency is every response's service time. For shopify-graphql a
	// query holds its requested cost for that long and is refunded the
	// difference to its actual cost when it ends, as Shopify does. Zero
	// means none.
	Latency time.Duration
	// Clock times the provider. Nil means the real clock.
	Clock clock.Clock
}

func (c *ProfileConfig) defaults() error {
	def := func(p *int64, v int64) {
		if *p == 0 {
			*p = v
		}
	}
	switch c.Profile {
	case "shopify-graphql":
		def(&c.Capacity, 1000)
		if c.Rate == 0 {
			c.Rate = 50
		}
		def(&c.RequestedCost, 100)
		def(&c.ActualCost, 40)
		def(&c.MaxQueryCost, 1000)
	case "shopify-rest":
		def(&c.Capacity, 40)
		if c.Rate == 0 {
			c.Rate = 2
		}
	case "binance":
		def(&c.Capacity, 6000)
		def(&c.OrderCapacity, 100)
		if c.Window == 0 {
			c.Window = time.Minute
		}
	case "github":
		def(&c.Capacity, 5000)
		if c.Window == 0 {
			c.Window = time.Hour
		}
		def(&c.SearchCapacity, 30)
		def(&c.GraphQLCapacity, 5000)
		def(&c.SecondaryPoints, 900)
		def(&c.SecondaryGraphQLPoints, 2000)
		def(&c.MaxConcurrent, 100)
		if c.SecondaryWindow == 0 {
			c.SecondaryWindow = time.Minute
		}
	default:
		return fmt.Errorf("%w: unknown profile %q (want one of %s)", ErrInvalidConfig, c.Profile, strings.Join(Profiles(), ", "))
	}
	if c.SearchCapacity < 0 || c.GraphQLCapacity < 0 || c.SecondaryPoints < 0 || c.SecondaryGraphQLPoints < 0 || c.MaxConcurrent < 0 || c.SecondaryWindow < 0 {
		return fmt.Errorf("%w: %s: github limits must be >= 0", ErrInvalidConfig, c.Profile)
	}
	if c.Capacity < 0 || c.OrderCapacity < 0 || c.RequestedCost < 0 || c.ActualCost < 0 || c.MaxQueryCost < 0 || c.BanAfter < 0 {
		return fmt.Errorf("%w: %s: counts must be >= 0", ErrInvalidConfig, c.Profile)
	}
	if !(c.Rate >= 0) || math.IsInf(c.Rate, 0) || c.Window < 0 || c.BanFor < 0 || c.Latency < 0 {
		return fmt.Errorf("%w: %s: rate, window and ban_for must be >= 0", ErrInvalidConfig, c.Profile)
	}
	if c.ActualCost > c.RequestedCost {
		return fmt.Errorf("%w: actual cost %d above requested cost %d", ErrInvalidConfig, c.ActualCost, c.RequestedCost)
	}
	if c.BanAfter == 0 {
		c.BanAfter = 5
	}
	if c.BanFor == 0 {
		c.BanFor = 2 * time.Minute
	}
	c.Clock = clock.Or(c.Clock)
	return nil
}

// ProfileStats counts what a ProfileProvider answered: a plain value.
type ProfileStats struct {
	Requests  int64 // every request
	Admitted  int64 // served within the limits
	Throttled int64 // 429 or THROTTLED
	Banned    int64 // answered 418
	Bans      int64 // bans imposed
	// TooCostly counts MAX_COST_EXCEEDED answers (shopify-graphql).
	TooCostly int64
	// Points is the actual cost of the queries served (shopify-graphql),
	// Weight the weight served (binance).
	Points, Weight int64
}

// ProfileProvider simulates one provider of Profiles. It is an
// http.Handler, safe for concurrent use; build it with NewProfileProvider.
type ProfileProvider struct {
	cfg ProfileConfig

	mu   sync.Mutex
	keys map[string]*profileKey

	requests, admitted, throttled, banned, bans, tooCostly, points, weight atomic.Int64
}

type profileKey struct {
	level  float64 // bucket: units in use (REST) or available (GraphQL)
	last   time.Time
	winEnd time.Time // windows: end of the current window
	used   int64
	// binance orders window
	ordEnd  time.Time
	ordUsed int64
	// github: the resources' windows, the secondary points' rolling logs,
	// the requests in flight
	gh       map[string]*ghWindow
	restLog  []pointsAt
	gqlLog   []pointsAt
	inFlight int64
	// bans
	backoffTill time.Time
	violations  []time.Time
	bannedTill  time.Time
	banFor      time.Duration
}

// NewProfileProvider validates cfg and returns the provider.
func NewProfileProvider(cfg ProfileConfig) (*ProfileProvider, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &ProfileProvider{cfg: cfg, keys: map[string]*profileKey{}}, nil
}

// Config returns the configuration with defaults applied.
func (p *ProfileProvider) Config() ProfileConfig { return p.cfg }

// Stats returns the provider's counters.
func (p *ProfileProvider) Stats() ProfileStats {
	return ProfileStats{Requests: p.requests.Load(), Admitted: p.admitted.Load(), Throttled: p.throttled.Load(),
		Banned: p.banned.Load(), Bans: p.bans.Load(), TooCostly: p.tooCostly.Load(), Points: p.points.Load(), Weight: p.weight.Load()}
}

// Limit returns the hidden limit in requests per second of calls shaped as
// the defaults (for shopify-graphql, queries of ActualCost; for binance,
// requests of weight wt), for the figures.
func (p *ProfileProvider) Limit(wt int64) float64 {
	c := p.cfg
	switch c.Profile {
	case "shopify-graphql":
		return c.Rate / float64(c.ActualCost)
	case "shopify-rest":
		return c.Rate
	case "binance":
		return float64(c.Capacity) / float64(max(wt, 1)) / c.Window.Seconds()
	case "github":
		// A REST GET: the core limit or the secondary points, whichever
		// is lower.
		return min(float64(c.Capacity)/c.Window.Seconds(), float64(c.SecondaryPoints)/c.SecondaryWindow.Seconds())
	}
	return float64(c.Capacity) / c.Window.Seconds()
}

func (p *ProfileProvider) key(k string, now time.Time) *profileKey {
	s, ok := p.keys[k]
	if !ok {
		s = &profileKey{last: now, banFor: p.cfg.BanFor}
		if p.cfg.Profile == "shopify-graphql" {
			s.level = float64(p.cfg.Capacity)
		}
		p.keys[k] = s
	}
	return s
}

// ServeHTTP answers one request.
func (p *ProfileProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := p.cfg.Clock.Now()
	p.requests.Add(1)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if p.cfg.Profile == "shopify-graphql" {
		p.shopifyGraphQL(w, r, now) // locks by itself, around its latency
		return
	}
	if p.cfg.Profile == "github" {
		// GitHub's concurrency limit counts the requests in flight,
		// latency included.
		p.mu.Lock()
		s := p.key(githubToken(r), now)
		s.inFlight++
		over := s.inFlight > p.cfg.MaxConcurrent
		if over {
			p.secondary(w, s, now)
		}
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			s.inFlight--
			p.mu.Unlock()
		}()
		if over {
			return
		}
	}
	if p.cfg.Latency > 0 && !p.wait(r) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// The provider decides when it has the request in hand, on its own
	// clock read under its lock, so that decisions are in the order of
	// their times (a time read before the latency or the lock let a
	// request decided later carry an earlier time, which leaks nothing).
	now = p.cfg.Clock.Now()
	switch p.cfg.Profile {
	case "shopify-rest":
		p.shopifyREST(w, r, now)
	case "binance":
		p.binance(w, r, now)
	case "github":
		p.github(w, r, now)
	}
}

// wait sleeps Latency on the provider's clock; false when the request's
// context ended first.
func (p *ProfileProvider) wait(r *http.Request) bool {
	t := p.cfg.Clock.NewTimer(p.cfg.Latency)
	select {
	case <-t.C():
		return true
	case <-r.Context().Done():
		t.Stop()
		return false
	}
}

func headerInt(r *http.Request, name string, def int64) int64 {
	if v, err := strconv.ParseInt(r.Header.Get(name), 10, 64); err == nil && v >= 0 {
		return v
	}
	return def
}

func (p *ProfileProvider) shopifyGraphQL(w http.ResponseWriter, r *http.Request, now time.Time) {
	c := p.cfg
	requested := headerInt(r, "X-Sim-Query-Cost", c.RequestedCost)
	actual := min(headerInt(r, "X-Sim-Actual-Cost", c.ActualCost), requested)
	status := map[string]any{"maximumAvailable": float64(c.Capacity), "restoreRate": c.Rate}
	cost := map[string]any{"requestedQueryCost": requested, "throttleStatus": status}
	body := map[string]any{"extensions": map[string]any{"cost": cost}}
	key := strings.ToLower(r.Host)
	p.mu.Lock()
	s := p.key(key, now)
	refill := func(now time.Time) {
		if dt := now.Sub(s.last).Seconds(); dt > 0 {
			s.level = min(float64(c.Capacity), s.level+dt*c.Rate)
			s.last = now
		}
	}
	refill(now)
	run := false
	switch {
	case requested > c.MaxQueryCost:
		p.tooCostly.Add(1)
		body = map[string]any{"errors": []any{map[string]any{
			"message":    fmt.Sprintf("Query cost is %d, which exceeds the single query max cost limit (%d).", requested, c.MaxQueryCost),
			"extensions": map[string]any{"code": "MAX_COST_EXCEEDED", "cost": requested, "maxCost": c.MaxQueryCost},
		}}}
	case s.level < float64(requested):
		p.throttled.Add(1)
		cost["actualQueryCost"] = nil
		body["errors"] = []any{map[string]any{"message": "Throttled", "extensions": map[string]any{"code": "THROTTLED"}}}
	default:
		run = true
		s.level -= float64(requested) // held while the query runs
	}
	p.mu.Unlock()
	if run && c.Latency > 0 {
		p.wait(r) // the query runs even if the client stops waiting
	}
	p.mu.Lock()
	if run {
		refill(c.Clock.Now())
		s.level += float64(requested - actual) // the difference refunded
		p.admitted.Add(1)
		p.points.Add(actual)
		cost["actualQueryCost"] = actual
		body["data"] = map[string]any{"shop": map[string]any{"name": r.Host}}
	}
	status["currentlyAvailable"] = math.Floor(max(s.level, 0))
	p.mu.Unlock()
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(body)
}

func (p *ProfileProvider) shopifyREST(w http.ResponseWriter, r *http.Request, now time.Time) {
	c := p.cfg
	s := p.key(strings.ToLower(r.Host), now)
	if dt := now.Sub(s.last).Seconds(); dt > 0 {
		s.level = max(0, s.level-dt*c.Rate)
		s.last = now
	}
	if s.level+1 > float64(c.Capacity) {
		p.throttled.Add(1)
		w.Header().Set("X-Shopify-Shop-Api-Call-Limit", fmt.Sprintf("%d/%d", c.Capacity, c.Capacity))
		w.Header().Set("Retry-After", "2.0")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"errors":"Exceeded 2 calls per second for api client. Reduce request rates to resume uninterrupted service."}` + "\n"))
		return
	}
	s.level++
	p.admitted.Add(1)
	w.Header().Set("X-Shopify-Shop-Api-Call-Limit", fmt.Sprintf("%d/%d", int64(math.Ceil(s.level)), c.Capacity))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{"products":[]}` + "\n"))
}

// binanceWeight is the request weight of a Spot API route, from Binance's
// documentation (GET /api/v3/depth at its default limit of 100).
func binanceWeight(method, path string) int64 {
	switch method + " " + path {
	case "GET /api/v3/exchangeInfo", "GET /api/v3/account", "GET /api/v3/myTrades":
		return 20
	case "GET /api/v3/trades":
		return 25
	case "GET /api/v3/depth":
		return 5
	case "GET /api/v3/order":
		return 4
	case "GET /api/v3/openOrders":
		return 6
	case "GET /api/v3/klines", "GET /api/v3/ticker/price", "GET /api/v3/ticker/24hr":
		return 2
	}
	return 1
}

// violate records a refused request; a request refused before the latest
// Retry-After passed is a violation, and BanAfter of them within a minute
// earn a ban (true).
func (p *ProfileProvider) violate(s *profileKey, now time.Time, retry time.Duration) bool {
	if now.Before(s.backoffTill) {
		cut := now.Add(-time.Minute)
		i := 0
		for i < len(s.violations) && !s.violations[i].After(cut) {
			i++
		}
		s.violations = append(s.violations[i:], now)
		if len(s.violations) >= p.cfg.BanAfter {
			s.violations = s.violations[:0]
			s.bannedTill = now.Add(s.banFor)
			s.banFor *= 2
			p.bans.Add(1)
			return true
		}
	}
	if till := now.Add(retry); till.After(s.backoffTill) {
		s.backoffTill = till
	}
	return false
}

func retryAfterSeconds(d time.Duration) string {
	return strconv.FormatInt(max(1, int64(math.Ceil(d.Seconds()))), 10)
}

func (p *ProfileProvider) binance(w http.ResponseWriter, r *http.Request, now time.Time) {
	c := p.cfg
	s := p.key(strings.ToLower(r.Host), now)
	h := w.Header()
	if now.Before(s.bannedTill) {
		p.banned.Add(1)
		h.Set("Retry-After", retryAfterSeconds(s.bannedTill.Sub(now)))
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write([]byte(`{"code":-1003,"msg":"Way too much request weight used; IP banned until later."}` + "\n"))
		return
	}
	// Windows aligned to the clock, as Binance's are.
	if !now.Before(s.winEnd) {
		s.winEnd, s.used = now.Truncate(c.Window).Add(c.Window), 0
	}
	if !now.Before(s.ordEnd) {
		s.ordEnd, s.ordUsed = now.Truncate(10*time.Second).Add(10*time.Second), 0
	}
	wt := binanceWeight(r.Method, r.URL.Path)
	order := r.Method == http.MethodPost && r.URL.Path == "/api/v3/order"
	var wait time.Duration
	if s.used+wt > c.Capacity {
		wait = s.winEnd.Sub(now)
	}
	if order && s.ordUsed+1 > c.OrderCapacity {
		wait = max(wait, s.ordEnd.Sub(now))
	}
	if wait > 0 {
		if p.violate(s, now, wait) {
			p.banned.Add(1)
			h.Set("Retry-After", retryAfterSeconds(s.bannedTill.Sub(now)))
			w.WriteHeader(http.StatusTeapot)
			_, _ = w.Write([]byte(`{"code":-1003,"msg":"Way too much request weight used; IP banned until later."}` + "\n"))
			return
		}
		p.throttled.Add(1)
		h.Set(weightHeader(c.Window), strconv.FormatInt(s.used, 10))
		h.Set("Retry-After", retryAfterSeconds(wait))
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"code":-1003,"msg":"Too much request weight used; please use WebSocket Streams for live updates to avoid polling the API."}` + "\n"))
		return
	}
	s.used += wt
	p.weight.Add(wt)
	p.admitted.Add(1)
	h.Set(weightHeader(c.Window), strconv.FormatInt(s.used, 10))
	if order {
		s.ordUsed++
		h.Set("X-Mbx-Order-Count-10s", strconv.FormatInt(s.ordUsed, 10))
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{}` + "\n"))
}

type ghWindow struct {
	end  time.Time
	used int64
}

type pointsAt struct {
	at     time.Time
	points int64
}

func githubToken(r *http.Request) string {
	if k := r.Header.Get("Authorization"); k != "" {
		return k
	}
	return strings.ToLower(r.Host)
}

// secondary answers a secondary rate limit (403, retry-after 60), or a ban
// when the token keeps coming back before its retry-after.
func (p *ProfileProvider) secondary(w http.ResponseWriter, s *profileKey, now time.Time) {
	h := w.Header()
	if now.Before(s.bannedTill) || p.violate(s, now, time.Minute) {
		p.banned.Add(1)
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"message":"You have triggered an abuse detection mechanism. Please wait before making more requests."}` + "\n"))
		return
	}
	p.throttled.Add(1)
	h.Set("Retry-After", "60")
	w.WriteHeader(http.StatusForbidden)
	_, _ = w.Write([]byte(`{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}` + "\n"))
}

// spend adds points to a rolling log of window, or reports false when
// they would take it above limit.
func spend(log *[]pointsAt, now time.Time, window time.Duration, limit, points int64) bool {
	cut, i, sum := now.Add(-window), 0, int64(0)
	for i < len(*log) && !(*log)[i].at.After(cut) {
		i++
	}
	*log = (*log)[i:]
	for _, e := range *log {
		sum += e.points
	}
	if sum+points > limit {
		return false
	}
	*log = append(*log, pointsAt{now, points})
	return true
}

func (p *ProfileProvider) github(w http.ResponseWriter, r *http.Request, now time.Time) {
	c := p.cfg
	s := p.key(githubToken(r), now)
	if now.Before(s.bannedTill) {
		p.secondary(w, s, now)
		return
	}
	resource, capacity, window, cost := "core", c.Capacity, c.Window, int64(1)
	graphql := r.Method == http.MethodPost && r.URL.Path == "/graphql"
	switch {
	case graphql:
		resource, capacity, cost = "graphql", c.GraphQLCapacity, max(headerInt(r, "X-Sim-Query-Cost", 1), 1)
	case strings.HasPrefix(r.URL.Path, "/search/"):
		resource, capacity, window = "search", c.SearchCapacity, time.Minute
	}
	if s.gh == nil {
		s.gh = map[string]*ghWindow{}
	}
	win := s.gh[resource]
	if win == nil {
		win = &ghWindow{}
		s.gh[resource] = win
	}
	if !now.Before(win.end) {
		win.end, win.used = now.Truncate(window).Add(window), 0
	}
	h := w.Header()
	h.Set("X-Ratelimit-Limit", strconv.FormatInt(capacity, 10))
	h.Set("X-Ratelimit-Reset", strconv.FormatInt(int64(math.Ceil(float64(win.end.UnixMilli())/1000)), 10))
	h.Set("X-Ratelimit-Resource", resource)
	if win.used+cost > capacity {
		// The primary limit: remaining 0, come back at the reset (said
		// with retry-after too to a token that came back too early).
		early := now.Before(s.backoffTill)
		if p.violate(s, now, win.end.Sub(now)) {
			p.secondary(w, s, now) // answers the ban
			return
		}
		p.throttled.Add(1)
		h.Set("X-Ratelimit-Remaining", "0")
		h.Set("X-Ratelimit-Used", strconv.FormatInt(win.used, 10))
		if early {
			h.Set("Retry-After", retryAfterSeconds(win.end.Sub(now)))
		}
		status := http.StatusTooManyRequests
		if r.Header.Get("X-Sim-403") != "" {
			status = http.StatusForbidden
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"message":"API rate limit exceeded"}` + "\n"))
		return
	}
	// The secondary points, in a rolling window.
	var ok bool
	if graphql {
		pts := int64(1)
		if r.Header.Get("X-Sim-Mutation") != "" {
			pts = 5
		}
		ok = spend(&s.gqlLog, now, c.SecondaryWindow, c.SecondaryGraphQLPoints, pts)
	} else {
		pts := int64(5)
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			pts = 1
		}
		ok = spend(&s.restLog, now, c.SecondaryWindow, c.SecondaryPoints, pts)
	}
	if !ok {
		p.secondary(w, s, now)
		return
	}
	win.used += cost
	p.admitted.Add(1)
	if graphql {
		p.points.Add(cost)
	}
	h.Set("X-Ratelimit-Remaining", strconv.FormatInt(capacity-win.used, 10))
	h.Set("X-Ratelimit-Used", strconv.FormatInt(win.used, 10))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{}` + "\n"))
}
