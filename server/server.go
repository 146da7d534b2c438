package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/outbound"
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
	// PermitTTL is how long an outbound permit waits for its report
	// before it is taken as never used. Zero means DefaultPermitTTL.
	PermitTTL time.Duration
	// MaxPermits bounds the unreported outbound permits held. Zero means
	// DefaultMaxPermits.
	MaxPermits int
	// Observer, when set, sees every decision, lease acquire and slot
	// config the server handles (observer.go): the dashboard's live feed.
	// Nil observes nothing.
	Observer Observer
}

// Server is the HTTP JSON API over a Limiter. It registers on servers the
// caller owns: mount Handler on an http.Server or a mux. It is safe for
// concurrent use. Build it with New; the zero value is not usable.
type Server struct {
	lim      *limiter.Limiter
	log      *slog.Logger
	reg      *prometheus.Registry
	metrics  *metrics
	maxBody  int64
	maxItems int
	policies map[string]*policyInfo
	listing  []byte // the GET /v1/policies body, built once
	handler  http.Handler
	slots    *slot.Scheduler
	leaseOps *prometheus.CounterVec // lease.go
	// slotMetrics is set when slots is (slot.go).
	slotMetrics *slotMetrics
	jobs        store.JobStore   // job.go
	obs         Observer         // observer.go; nil: none
	outbound    *outbound.Client // outbound.go
	profiles    OutboundProfiles
	outPermits  *permitTable
	openapiDoc  []byte // GET /openapi.json
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
		lim:      cfg.Limiter,
		log:      cfg.Logger,
		reg:      cfg.Registry,
		maxBody:  cfg.MaxBodyBytes,
		maxItems: cfg.MaxItems,
		policies: map[string]*policyInfo{},
		slots:    cfg.Slots,
		jobs:     cfg.Jobs,
		obs:      cfg.Observer,
		outbound: cfg.Outbound,
		profiles: cfg.Profiles,
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

	policies := s.lim.Policies()
	names := make([]string, 0, len(policies))
	list := policyList{Policies: make([]policyJSON, 0, len(policies))}
	for _, p := range policies {
		h, err := s.lim.Handle(p.Name)
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		s.policies[p.Name] = &policyInfo{handle: h, max: p.Limit().Max(), header: policyHeaderItem(p)}
		names = append(names, p.Name)
		list.Policies = append(list.Policies, policyToJSON(p))
	}
	listing, err := json.Marshal(list)
	if err != nil {
		return nil, fmt.Errorf("server: policies: %w", err)
	}
	s.listing = append(listing, '\n')

	m, err := newMetrics(s.reg, names)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	if err := s.registerMemMetrics(); err != nil { // metrics.go
		return nil, err
	}
	if err := s.registerLeaseMetrics(); err != nil {
		return nil, err
	}
	if s.slots != nil {
		if s.slotMetrics, err = newSlotMetrics(s.reg); err != nil {
			return nil, err
		}
	}
	if s.openapiDoc, err = OpenAPI(); err != nil {
		return nil, err
	}
	s.handler = s.routes()
	return s, nil
}

// Handler returns the server's routes as one http.Handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Route labels of sluice_http_requests_total.
const (
	routeTake     = "/v1/take"
	routePolicies = "/v1/policies"
	routeHealth   = "/healthz"
	routeMetrics  = "/metrics"
	routeOther    = "other"
)

// route is one endpoint: a method on a path pattern. path is also the
// route label of sluice_http_requests_total.
type route struct {
	method, path string
	h            http.HandlerFunc
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
		{http.MethodPost, routeTake, s.take},
		{http.MethodGet, routePolicies, s.listPolicies},
		{http.MethodGet, routeHealth, s.health},
		{http.MethodGet, routeMetrics, metricsHandler.ServeHTTP},
		{http.MethodGet, routeOpenAPI, s.openAPI}, // openapi.go
	}
	rts = append(rts, s.leaseRoutes()...)    // lease.go
	rts = append(rts, s.jobRoutes()...)      // job.go
	rts = append(rts, s.outboundRoutes()...) // outbound.go
	return append(rts, s.slotRoutes()...)    // slot.go
}

// methods405 are the methods a path answers 405 to when it does not serve
// them; any other method gets the path's catch-all 405 where it has one.
var methods405 = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodOptions}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	rts := s.endpoints()
	var paths []string
	allowed := map[string][]string{} // path -> its methods
	for _, rt := range rts {
		if allowed[rt.path] == nil {
			paths = append(paths, rt.path)
		}
		allowed[rt.path] = append(allowed[rt.path], rt.method)
		mux.Handle(rt.method+" "+rt.path, s.wrap(rt.path, rt.h))
	}
	for _, path := range paths {
		allow := allowHeader(allowed[path])
		h := s.wrap(path, methodNotAllowed(allow))
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
	mux.Handle("/", s.wrap(routeOther, func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, &problem{
			Type: typeBlank, Title: http.StatusText(http.StatusNotFound), Status: http.StatusNotFound, Detail: detail,
		})
	}))
	return mux
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
// sluice_http_requests_total, and turns a panic into a logged 500 problem.
func (s *Server) wrap(route string, h http.HandlerFunc) http.Handler {
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
		// Strings that are not text, before a decoder hides them (ident.go).
		if p := rawTextProblem(r); p != nil {
			writeProblem(sw, p)
			return
		}
		h(sw, r)
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

func (s *Server) listPolicies(w http.ResponseWriter, _ *http.Request) {
	writeBody(w, http.StatusOK, contentJSON, s.listing)
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
