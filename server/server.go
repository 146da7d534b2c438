package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicerl/sluice/auth"
	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/job"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/provider"
	"github.com/sluicerl/sluice/slot"
	"github.com/sluicerl/sluice/store"
)

// Defaults for the zero fields of Config.
const (
	// DefaultMaxBodyBytes bounds a request body (4 MiB): room for a slot
	// batch of slot.DefaultMaxBatch (10,000) events with event ids of the
	// longest length, store.MaxEventIDLen (256 bytes), written compactly
	// with nanosecond times (3,200,035 bytes).
	DefaultMaxBodyBytes = 4 << 20
	// DefaultMaxItems bounds the items of one all-or-nothing take.
	DefaultMaxItems = 64
)

// Config configures a Server. Zero fields take the documented defaults.
type Config struct {
	// Limiter decides every take. Required.
	Limiter *limiter.Limiter
	// Logger receives errors, recovered panics and (at debug level) one
	// line per request. Nil discards everything. The server never logs
	// keys; a store error is logged as the store worded it.
	Logger *slog.Logger
	// Registry receives the server's metrics and is what /metrics serves.
	// Nil means a new registry that also holds the Go runtime and process
	// collectors. A registry holds the metrics of one Server: New fails if
	// they are already registered.
	Registry *prometheus.Registry
	// MaxBodyBytes bounds a request body; larger bodies get 413. Zero means
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxItems bounds the items of one all-or-nothing take. Zero means
	// DefaultMaxItems.
	MaxItems int
	// Slots serves the slot API (/api/v1/slots..., /admin/rate-limit/...,
	// see slot.go). Nil leaves those routes out.
	Slots *slot.Scheduler
	// Jobs serves the jobs API and worker protocol (/v1/connectors,
	// /v1/jobs..., /v1/runs, /v1/gaps, /v1/breaker-transitions; see
	// job.go). Nil leaves those routes out.
	Jobs store.JobStore
	// Outbound serves the adaptive calls of workers in any language
	// (/v1/outbound/acquire, /v1/outbound/report, /v1/outbound/{key}; see
	// outbound.go). Nil leaves those routes out.
	Outbound *outbound.Client
	// Profiles resolves the "profile" field of outbound requests. Nil
	// refuses any profile with 422.
	Profiles OutboundProfiles
	// Providers holds the provider profiles (package provider) the server
	// lists at GET /v1/providers and applies to outbound calls naming one
	// ("profile": the key normalized, the provider's limits reserved at
	// acquire and settled at report, as outbound.AcquireOpts.Profile does;
	// Outbound must be built over the same registry, its
	// ProviderProfiles). A reload swaps the registry's set. When Profiles
	// is nil it resolves the "profile" field too. Nil leaves the provider
	// routes out.
	Providers *provider.Registry
	// PermitTTL is how long an outbound permit waits for its report
	// before it is taken as never used. Zero means DefaultPermitTTL.
	PermitTTL time.Duration
	// MaxPermits bounds the unreported outbound permits held. Zero means
	// DefaultMaxPermits.
	MaxPermits int
	// Auth, when set, requires on every route but /healthz and /metrics a
	// bearer token of its current set holding the route's scope (see
	// auth.go). Nil serves everyone.
	Auth *auth.Keyring
	// Reload, when set, is what POST /v1/admin/reload runs: reread the
	// configuration and swap it in (Server.Reload, auth.Keyring.Store),
	// or return why not, leaving the old one in force. Nil answers that
	// endpoint 501. See reload.go.
	Reload func(ctx context.Context) error
	// Idempotency bounds the Idempotency-Key cache (idempotency.go). Zero
	// fields take its defaults.
	Idempotency IdempotencyConfig
	// Clock times Idempotency-Key expiry and the next run of a job
	// finished by its schedule. Nil means the real clock.
	Clock clock.Clock
	// Observer, when set, sees every decision, lease acquire and slot
	// config the server handles (observer.go): the dashboard's live feed.
	// Nil observes nothing.
	Observer Observer
}

// Server is the HTTP JSON API over a Limiter. It registers on servers the
// caller owns: mount Handler on an http.Server or a mux. It is safe for
// concurrent use. Build it with New; the zero value is not usable.
type Server struct {
	// live is the current policy snapshot; each request loads it once
	// (wrap), so a reload never shows a request half of a config.
	live     atomic.Pointer[live]
	log      *slog.Logger
	reg      *prometheus.Registry
	metrics  *metrics
	maxBody  int64
	maxItems int
	handler  http.Handler
	auth     *auth.Keyring
	reloadFn func(ctx context.Context) error
	idem     *idempotency // idempotency.go
	reloadMu sync.Mutex   // serialises Reload
	slots    *slot.Scheduler
	leaseOps *prometheus.CounterVec // lease.go
	// slotMetrics is set when slots is (slot.go).
	slotMetrics *slotMetrics
	jobs        store.JobStore // job.go
	// connPolicies reads a connector's policies for the claim gate
	// (job.go), cached for a second.
	connPolicies func(ctx context.Context, connectorID string) ([]string, error)
	clk          clock.Clock      // Config.Clock: the schedule of a finish (job.go)
	obs          Observer         // observer.go; nil: none
	outbound     *outbound.Client // outbound.go
	profiles     OutboundProfiles
	providers    *provider.Registry // providers.go
	outPermits   *permitTable
	openapiDoc   []byte // GET /openapi.json
}

// live is an immutable snapshot of the policies: what a reload swaps.
type live struct {
	lim      *limiter.Limiter
	policies map[string]*policyInfo
	listing  []byte // the GET /v1/policies body
	// removed are the policies earlier configs held and this one does
	// not: their requests answer 404 policy-removed, not 422 unknown.
	removed map[string]bool
}

// policyInfo is what the server precomputes for one policy.
type policyInfo struct {
	handle *limiter.Handle
	max    int64  // the most one request may cost
	header string // its RateLimit-Policy list member
}

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Limiter == nil {
		return nil, errors.New("server: config: Limiter is required")
	}
	if cfg.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("server: config: MaxBodyBytes must be >= 0, got %d", cfg.MaxBodyBytes)
	}
	if cfg.PermitTTL < 0 || cfg.MaxPermits < 0 {
		return nil, fmt.Errorf("server: config: PermitTTL and MaxPermits must be >= 0, got %v and %d", cfg.PermitTTL, cfg.MaxPermits)
	}
	if cfg.MaxItems < 0 {
		return nil, fmt.Errorf("server: config: MaxItems must be >= 0, got %d", cfg.MaxItems)
	}
	s := &Server{
		log:       cfg.Logger,
		reg:       cfg.Registry,
		maxBody:   cfg.MaxBodyBytes,
		maxItems:  cfg.MaxItems,
		slots:     cfg.Slots,
		jobs:      cfg.Jobs,
		obs:       cfg.Observer,
		outbound:  cfg.Outbound,
		profiles:  cfg.Profiles,
		providers: cfg.Providers,
		auth:      cfg.Auth,
		reloadFn:  cfg.Reload,
	}
	if s.profiles == nil && s.providers != nil {
		s.profiles = registryProfiles{s.providers}
	}
	s.clk = clock.Or(cfg.Clock)
	if s.jobs != nil {
		s.connPolicies = job.ConnectorPolicies(s.jobs, time.Second, nil)
	}
	if s.outbound != nil {
		ttl, maxPermits := cfg.PermitTTL, cfg.MaxPermits
		if ttl == 0 {
			ttl = DefaultPermitTTL
		}
		if maxPermits == 0 {
			maxPermits = DefaultMaxPermits
		}
		s.outPermits = newPermitTable(ttl, maxPermits)
	}
	idem, err := newIdempotency(cfg.Idempotency, clock.Or(cfg.Clock))
	if err != nil {
		return nil, err
	}
	s.idem = idem
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.maxBody == 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	if s.maxItems == 0 {
		s.maxItems = DefaultMaxItems
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
		s.reg.MustRegister(
			collectors.NewGoCollector(),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		)
	}

	lv, err := newLive(cfg.Limiter, nil)
	if err != nil {
		return nil, err
	}
	s.live.Store(lv)
	m, err := newMetrics(s.reg, nil)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	if err := s.registerMemMetrics(cfg.Limiter); err != nil { // metrics.go
		return nil, err
	}
	if err := s.registerLeaseMetrics(); err != nil {
		return nil, err
	}
	s.seedMetrics(lv)
	if s.slots != nil {
		if s.slotMetrics, err = newSlotMetrics(s.reg); err != nil {
			return nil, err
		}
	}
	if s.openapiDoc, err = OpenAPI(); err != nil {
		return nil, err
	}
	if s.handler, err = s.routes(s.endpoints()); err != nil {
		return nil, err
	}
	return s, nil
}

// newLive builds the snapshot of lim's policies. prev is the snapshot it
// replaces (nil at start), for the removed set.
func newLive(lim *limiter.Limiter, prev *live) (*live, error) {
	lv := &live{lim: lim, policies: map[string]*policyInfo{}, removed: map[string]bool{}}
	policies := lim.Policies()
	list := policyList{Policies: make([]policyJSON, 0, len(policies))}
	for _, p := range policies {
		h, err := lim.Handle(p.Name)
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		lv.policies[p.Name] = &policyInfo{handle: h, max: p.Limit().Max(), header: policyHeaderItem(p)}
		list.Policies = append(list.Policies, policyToJSON(p))
	}
	listing, err := json.Marshal(list)
	if err != nil {
		return nil, fmt.Errorf("server: policies: %w", err)
	}
	lv.listing = append(listing, '\n')
	if prev != nil {
		for name := range prev.removed {
			lv.removed[name] = true
		}
		for name := range prev.policies {
			lv.removed[name] = true
		}
		for name := range lv.policies {
			delete(lv.removed, name)
		}
	}
	return lv, nil
}

// Handler returns the server's routes as one http.Handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Route labels of sluice_http_requests_total.
const (
	routeTake     = "/v1/take"
	routePolicies = "/v1/policies"
	routeHealth   = "/healthz"
	routeMetrics  = "/metrics"
	routeReload   = "/v1/admin/reload"
	routeOther    = "other"
)

// route is one endpoint: a method on a path pattern. path is also the
// route label of sluice_http_requests_total.
type route struct {
	method, path string
	h            http.HandlerFunc
	// scope is what a token needs to call the route (auth.Public: no
	// token). Every route names one: New refuses a route without.
	scope auth.Scope
}

// endpoints is the route table: every endpoint the server answers, in the
// order the 404 lists them.
func (s *Server) endpoints() []route {
	metricsHandler := promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelError),
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: false,
	})
	rts := []route{
		{http.MethodPost, routeTake, s.take, auth.Take},
		{http.MethodGet, routePolicies, s.listPolicies, auth.Read},
		{http.MethodGet, routeHealth, s.health, auth.Public},
		{http.MethodGet, routeMetrics, metricsHandler.ServeHTTP, auth.Public},
		{http.MethodGet, routeOpenAPI, s.openAPI, auth.Read}, // openapi.go
		{http.MethodPost, routeReload, s.reload, auth.Admin}, // reload.go
	}
	rts = append(rts, s.leaseRoutes()...)    // lease.go
	rts = append(rts, s.jobRoutes()...)      // job.go
	rts = append(rts, s.outboundRoutes()...) // outbound.go
	rts = append(rts, s.providerRoutes()...) // providers.go
	return append(rts, s.slotRoutes()...)    // slot.go
}

// methods405 are the methods a path answers 405 to when it does not serve
// them; any other method gets the path's catch-all 405 where it has one.
var methods405 = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodOptions}

func (s *Server) routes(rts []route) (http.Handler, error) {
	mux := http.NewServeMux()
	var paths []string
	allowed := map[string][]string{} // path -> its methods
	for _, rt := range rts {
		if rt.scope == 0 || (rt.scope != auth.Public && rt.scope&^auth.All != 0) || bits.OnesCount8(uint8(rt.scope)) != 1 {
			return nil, fmt.Errorf("server: route %s %s: want exactly one scope (auth.Public for an open route), got %q", rt.method, rt.path, rt.scope)
		}
		if allowed[rt.path] == nil {
			paths = append(paths, rt.path)
		}
		allowed[rt.path] = append(allowed[rt.path], rt.method)
		mux.Handle(rt.method+" "+rt.path, s.wrap(rt.path, rt.scope, s.idem.wrap(rt.method, rt.path, rt.h)))
	}
	for _, path := range paths {
		allow := allowHeader(allowed[path])
		h := s.wrap(path, auth.Public, methodNotAllowed(allow))
		// A 405 for each other method, so that a more specific path's
		// answer (POST /api/v1/slots/batch) wins over a wildcard path's
		// (GET /api/v1/slots/{eventId...}) for every method...
		for _, m := range methods405 {
			if !slices.Contains(allowed[path], m) && !(m == http.MethodHead && slices.Contains(allowed[path], http.MethodGet)) {
				mux.Handle(m+" "+path, h)
			}
		}
		// ...and the bare path for the rest, unless it would conflict
		// with a wildcard route of another method that also matches it.
		if !shadowed(path, rts) {
			mux.Handle(path, h)
		}
	}
	list := make([]string, len(rts))
	for i, rt := range rts {
		list[i] = rt.method + " " + rt.path
	}
	detail := "no such endpoint; the endpoints are " + strings.Join(list, ", ")
	mux.Handle("/", s.wrap(routeOther, auth.Public, func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, &problem{
			Type: typeBlank, Title: http.StatusText(http.StatusNotFound), Status: http.StatusNotFound, Detail: detail,
		})
	}))
	return mux, nil
}

// allowHeader is the Allow header of a path serving methods: GET answers
// HEAD too.
func allowHeader(methods []string) string {
	var out []string
	for _, m := range methods {
		out = append(out, m)
		if m == http.MethodGet {
			out = append(out, http.MethodHead)
		}
	}
	slices.Sort(out)
	return strings.Join(slices.Compact(out), ", ")
}

// shadowed reports whether another route's pattern, with wildcards,
// matches every request path matches: "/api/v1/slots/batch" under
// "/api/v1/slots/{eventId...}", "/v1/jobs/claim" under "/v1/jobs/{id}".
// Registering path for every method beside that route's method would make
// two patterns neither of which is more specific (net/http panics).
func shadowed(path string, rts []route) bool {
	for _, rt := range rts {
		if rt.path != path && covers(rt.path, path) {
			return true
		}
	}
	return false
}

// covers reports whether pattern's path matches every path that path's
// does: segment by segment, a wildcard covers anything, a literal only
// itself, and a trailing {name...} the rest.
func covers(pattern, path string) bool {
	p, q := strings.Split(pattern, "/"), strings.Split(path, "/")
	for i, seg := range p {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "...}") {
			return len(q) > i
		}
		if i >= len(q) {
			return false
		}
		wild := strings.HasPrefix(seg, "{")
		if !wild && seg != q[i] {
			return false
		}
	}
	return len(p) == len(q)
}

func methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeProblem(w, &problem{
			Type: typeBlank, Title: http.StatusText(http.StatusMethodNotAllowed), Status: http.StatusMethodNotAllowed,
			Detail: fmt.Sprintf("method %s is not allowed here; allowed: %s", truncate(r.Method, 32), allow),
		})
	}
}

// wrap bounds the request body, counts the response in
// sluice_http_requests_total, turns a panic into a logged 500 problem,
// checks the caller's token for scope (auth.go) and gives the handler the
// current policy snapshot (liveOf).
func (s *Server) wrap(route string, scope auth.Scope, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil {
			// The original writer, so that net/http closes the
			// connection after an oversized body.
			r.Body = http.MaxBytesReader(w, r.Body, s.maxBody)
		}
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v != nil && v != http.ErrAbortHandler { // ErrAbortHandler is a sentinel panic value
				s.log.Error("server: panic serving request",
					"route", route, "method", r.Method, "panic", v, "stack", string(debug.Stack()))
				if !sw.wrote {
					writeProblem(sw, &problem{
						Type: typeBlank, Title: http.StatusText(http.StatusInternalServerError),
						Status: http.StatusInternalServerError, Detail: "internal error; it has been logged",
					})
				} else {
					v = http.ErrAbortHandler // the response is cut: abort the connection
				}
			}
			s.metrics.requests.WithLabelValues(route, strconv.Itoa(sw.code())).Inc()
			s.log.Debug("request", "method", r.Method, "route", route, "status", sw.code())
			if v == http.ErrAbortHandler {
				panic(v)
			}
		}()
		rs := &reqState{live: s.live.Load()}
		if !s.authorize(sw, r, scope, rs) { // auth.go
			return
		}
		// Strings that are not text, before a decoder hides them (ident.go).
		if p := rawTextProblem(r); p != nil {
			writeProblem(sw, p)
			return
		}
		h(sw, r.WithContext(context.WithValue(r.Context(), reqStateKey{}, rs)))
	})
}

// statusWriter records the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) code() int {
	if !w.wrote {
		return http.StatusOK
	}
	return w.status
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, contentJSON, map[string]string{"status": "ok"})
}

func (s *Server) listPolicies(w http.ResponseWriter, r *http.Request) {
	writeBody(w, http.StatusOK, contentJSON, s.liveOf(r).listing)
}

// reqState is what wrap learns of a request before its handler runs.
type reqState struct {
	live      *live
	principal auth.Principal // the zero Principal without auth
}

type reqStateKey struct{}

func stateOf(r *http.Request) *reqState {
	if rs, ok := r.Context().Value(reqStateKey{}).(*reqState); ok {
		return rs
	}
	return nil
}

// liveOf is the policy snapshot of a request: the one wrap loaded.
func (s *Server) liveOf(r *http.Request) *live {
	if rs := stateOf(r); rs != nil {
		return rs.live
	}
	return s.live.Load()
}

type policyList struct {
	Policies []policyJSON `json:"policies"`
}

type policyJSON struct {
	Name        string `json:"name"`
	Algorithm   string `json:"algorithm"`
	Rate        int64  `json:"rate"`
	PeriodMs    int64  `json:"periodMs"`
	Burst       int64  `json:"burst"`
	Shadow      bool   `json:"shadow"`
	Description string `json:"description"`
	Permits     int64  `json:"permits,omitempty"` // concurrency only
	TTLMs       int64  `json:"ttlMs,omitempty"`   // concurrency only
}

func policyToJSON(p limiter.Policy) policyJSON {
	out := policyJSON{
		Name:        p.Name,
		Algorithm:   p.Algorithm.String(),
		Rate:        p.Rate,
		PeriodMs:    p.Period.Milliseconds(),
		Shadow:      p.Shadow,
		Description: p.Description,
	}
	if p.Algorithm == store.GCRA { // the effective burst: 0 in the policy means rate
		out.Burst = p.Limit().Max()
	}
	out.Permits, out.TTLMs = p.Permits, p.TTL.Milliseconds()
	return out
}

const (
	contentJSON    = "application/json"
	contentProblem = "application/problem+json"
)

// writeJSON writes v as a JSON body with the given status.
func writeJSON(w http.ResponseWriter, status int, contentType string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only the server's own types are marshalled; this cannot happen.
		status, contentType = http.StatusInternalServerError, contentProblem
		b = []byte(`{"type":"about:blank","title":"Internal Server Error","status":500}`)
	}
	writeBody(w, status, contentType, append(b, '\n'))
}

func writeBody(w http.ResponseWriter, status int, contentType string, b []byte) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
