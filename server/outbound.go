package server

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluicerl/sluice/auth"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/provider"
	"github.com/sluicerl/sluice/retry"
	"github.com/sluicerl/sluice/store"
)

// The adaptive calls over HTTP (issue 19, section 2): a worker in any
// language asks for a permit before each call to an upstream, makes the
// call itself, and reports the upstream's answer, which feeds package
// outbound's layers for the key exactly as its Go client's calls do (signal
// parsing, AIMD, the breaker, the retry budget, and the Retry-After that
// pauses the key for every process sharing the store). Served when
// Config.Outbound is set.

// Outbound problem types.
const (
	// TypeOutboundWait: 429, the key's turn is further off than the
	// request's waitMs; retryAfterMs says when to ask again, paused whether
	// a Retry-After (a ban, an exhausted quota) pauses the key for the
	// fleet, busy whether the key's bulkhead is full.
	TypeOutboundWait = "urn:sluice:problem:outbound-wait"
	// TypeBreakerOpen: 503, the key's circuit breaker is open (or
	// half-open with its probes in use): the upstream is failing, not
	// Sluice. retryAfterMs is how long it stays open.
	TypeBreakerOpen = "urn:sluice:problem:breaker-open"
	// TypePermitDone: 409, the permit was reported already.
	TypePermitDone = "urn:sluice:problem:permit-done"
	// TypeOutboundKeyUnknown: 404, this server holds no state for the key
	// (never called through it, or idle and dropped).
	TypeOutboundKeyUnknown = "urn:sluice:problem:outbound-key-unknown"
	// TypeUnknownProfile: 422, a profile the server does not hold (or any
	// profile, when it holds none).
	TypeUnknownProfile = "urn:sluice:problem:unknown-profile"
)

// Outbound routes, also route labels of sluice_http_requests_total.
const (
	routeOutboundAcquire = "/v1/outbound/acquire"
	routeOutboundReport  = "/v1/outbound/report"
	routeOutboundKey     = "/v1/outbound/{key}"
)

// Defaults and bounds of the outbound endpoints.
const (
	// DefaultPermitTTL is Config.PermitTTL when it is zero.
	DefaultPermitTTL = time.Minute
	// MaxOutboundWait bounds an acquire's waitMs: the server holds the
	// request while it waits, within its write timeout.
	MaxOutboundWait = 20 * time.Second
	// DefaultMaxPermits is Config.MaxPermits when it is zero.
	DefaultMaxPermits = 100_000
	// MaxReportBody bounds a report's body excerpt (read for GraphQL
	// extensions.cost and THROTTLED errors).
	MaxReportBody = 64 << 10
)

// OutboundProfiles names the provider profiles that the "profile" field of
// an outbound request may name (package provider implements it; the
// caller wires it). Implementations must be safe for concurrent use.
type OutboundProfiles interface {
	// OutboundKey returns the key that calls for key under profile are
	// paced under (a profile may normalize it: a Shopify shop's domain),
	// or an error naming what is wrong: an unknown profile (wrap
	// ErrUnknownProfile), or a key the profile does not accept.
	OutboundKey(profile, key string) (string, error)
}

// ErrUnknownProfile is wrapped by an OutboundProfiles for a profile it
// does not hold.
var ErrUnknownProfile = errors.New("server: unknown provider profile")

// permitTable is the server's table of outbound permits granted and not yet
// reported. A reported permit stays (done) until its expiry, so that a
// second report is told so rather than counted twice. It is safe for
// concurrent use.
type permitTable struct {
	ttl  time.Duration
	max  int
	mu   sync.Mutex
	m    map[string]*permitEntry
	next time.Time // the next sweep
}

type permitEntry struct {
	p       *outbound.Permit
	expires time.Time
	done    bool
}

func newPermitTable(ttl time.Duration, max int) *permitTable {
	return &permitTable{ttl: ttl, max: max, m: map[string]*permitEntry{}}
}

// add files p under a new id, after dropping expired permits (cancelled:
// their attempt is taken as never made). It fails when the table is full.
func (t *permitTable) add(p *outbound.Permit, now time.Time) (string, time.Time, bool) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := base64.RawURLEncoding.EncodeToString([]byte(p.Key())) + "." + hex.EncodeToString(b[:])
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.After(t.next) || len(t.m) >= t.max {
		t.sweep(now)
	}
	if len(t.m) >= t.max {
		return "", time.Time{}, false
	}
	exp := now.Add(t.ttl)
	t.m[id] = &permitEntry{p: p, expires: exp}
	return id, exp, true
}

func (t *permitTable) sweep(now time.Time) {
	for id, e := range t.m {
		if !now.Before(e.expires) {
			e.p.Cancel()
			delete(t.m, id)
		}
	}
	t.next = now.Add(t.ttl / 2)
}

// take marks id's permit done and returns it; done reports a permit
// reported before.
func (t *permitTable) take(id string, now time.Time) (p *outbound.Permit, found, done bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[id]
	if !ok {
		return nil, false, false
	}
	if !now.Before(e.expires) {
		e.p.Cancel()
		delete(t.m, id)
		return nil, false, false
	}
	if e.done {
		return nil, true, true
	}
	e.done = true
	return e.p, true, false
}

// permitKey returns the key a permit id names.
func permitKey(id string) (string, bool) {
	enc, _, ok := strings.Cut(id, ".")
	if !ok {
		return "", false
	}
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || store.CheckKey(string(raw)) != nil {
		return "", false
	}
	return string(raw), true
}

// outboundRoutes are the outbound endpoints, when the server has an
// outbound client.
func (s *Server) outboundRoutes() []route {
	if s.outbound == nil {
		return nil
	}
	return []route{
		{http.MethodPost, routeOutboundAcquire, s.outboundAcquire, auth.Take},
		{http.MethodPost, routeOutboundReport, s.outboundReport, auth.Take},
		{http.MethodGet, routeOutboundKey, s.outboundSnapshot, auth.Read},
	}
}

// outboundKey checks a key and applies its profile.
func (s *Server) outboundKey(errs *fieldErrs, key, profile string, in string) string {
	at := func(f string) []string {
		if in == "" {
			return []string{f}
		}
		return []string{in, f}
	}
	if key == "" {
		errs.add(TypeInvalidRequest, at("key"), "is required")
		return ""
	}
	if why := idReason(key, store.MaxIDBytes); why != "" {
		errs.add(TypeInvalidRequest, at("key"), "%s", why)
		return ""
	}
	if profile == "" {
		return key
	}
	if s.profiles == nil {
		errs.add(TypeUnknownProfile, at("profile"), "names %q, but this server holds no provider profiles", truncate(profile, 64))
		return ""
	}
	k, err := s.profiles.OutboundKey(profile, key)
	switch {
	case errors.Is(err, ErrUnknownProfile):
		errs.add(TypeUnknownProfile, at("profile"), "names %q, a profile this server does not hold", truncate(profile, 64))
		return ""
	case err != nil:
		errs.add(TypeInvalidRequest, at("key"), "is not a key of profile %q: %v", truncate(profile, 64), err)
		return ""
	}
	if why := idReason(k, store.MaxIDBytes); why != "" {
		errs.add(TypeInvalidRequest, at("key"), "becomes %q under profile %q, which %s", truncate(k, 64), truncate(profile, 64), why)
		return ""
	}
	return k
}

type outboundAcquireBody struct {
	Key        string `json:"key"`
	Profile    string `json:"profile"`
	WaitMs     *int64 `json:"waitMs"`
	Idempotent bool   `json:"idempotent"`
	// The call as its profile prices it (with profile only).
	Method string `json:"method"`
	Path   string `json:"path"`
	Cost   *int64 `json:"cost"`
}

type permitJSON struct {
	Permit    string `json:"permit"`
	Key       string `json:"key"`
	GrantedAt string `json:"grantedAt"`
	ExpiresAt string `json:"expiresAt"`
	WaitedMs  int64  `json:"waitedMs"`
}

type outboundRefusal struct {
	problem
	Key          string `json:"key"`
	RetryAfterMs int64  `json:"retryAfterMs"`
	Paused       bool   `json:"paused,omitempty"`
	Busy         bool   `json:"busy,omitempty"`
}

func (s *Server) outboundAcquire(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	var body outboundAcquireBody
	if p := s.readJSON(r, &body, "key, and optionally profile (with method, path and cost), waitMs and idempotent"); p != nil {
		writeProblem(w, p)
		return
	}
	var errs fieldErrs
	key := s.outboundKey(&errs, body.Key, body.Profile, "")
	var wait time.Duration
	if body.WaitMs != nil {
		if *body.WaitMs < 0 || *body.WaitMs > MaxOutboundWait.Milliseconds() {
			errs.add(TypeInvalidRequest, []string{"waitMs"}, "must be from 0 to %d, got %d", MaxOutboundWait.Milliseconds(), *body.WaitMs)
		} else {
			wait = time.Duration(*body.WaitMs) * time.Millisecond
		}
	}
	opts := &outbound.AcquireOpts{MaxWait: wait, Idempotent: body.Idempotent}
	if body.Cost != nil && (*body.Cost < 1 || *body.Cost > 1_000_000_000) {
		errs.add(TypeInvalidRequest, []string{"cost"}, "must be from 1 to 1000000000, got %d", *body.Cost)
	}
	if (body.Method != "" || body.Path != "" || body.Cost != nil) && body.Profile == "" {
		errs.add(TypeInvalidRequest, []string{"profile"}, "is required with method, path or cost: they price the call under its profile")
	}
	if len(body.Method) > 16 || len(body.Path) > 2048 {
		errs.add(TypeInvalidRequest, []string{"path"}, "method is at most 16 bytes and path at most 2048")
	}
	if body.Profile != "" && s.providers != nil {
		// The profile's limits, as outbound applies them.
		opts.Profile = body.Profile
		opts.Call = outbound.ProviderCall{Method: body.Method, Path: body.Path}
		if body.Cost != nil {
			opts.Call.Cost = *body.Cost
		}
	}
	if len(errs) > 0 {
		writeProblem(w, invalid(errs))
		return
	}
	start := time.Now()
	p, err := s.outbound.Acquire(r.Context(), key, opts)
	var we *outbound.WaitError
	var oe *outbound.OpenError
	switch {
	case errors.As(err, &we):
		retry := we.RetryAfter
		out := outboundRefusal{Key: key, RetryAfterMs: ceilMillis(retry), Paused: we.Paused, Busy: we.Busy,
			problem: problem{Type: TypeOutboundWait, Title: "Wait for the key's turn", Status: http.StatusTooManyRequests, Detail: we.Error()}}
		if we.Busy {
			out.Detail = "every place of the key's bulkhead is taken; ask again when a call of yours has reported"
		}
		w.Header().Set("Retry-After", retryAfterSeconds(retry))
		writeJSON(w, out.Status, contentProblem, out)
		return
	case errors.As(err, &oe):
		out := outboundRefusal{Key: key, RetryAfterMs: ceilMillis(oe.RetryAfter),
			problem: problem{Type: TypeBreakerOpen, Title: "Circuit breaker open", Status: http.StatusServiceUnavailable,
				Detail: "the key's circuit breaker is open: its upstream has been failing; no call should be made"}}
		w.Header().Set("Retry-After", retryAfterSeconds(oe.RetryAfter))
		writeJSON(w, out.Status, contentProblem, out)
		return
	case err != nil:
		s.outboundError(w, err, "#/key")
		return
	}
	now := time.Now()
	id, exp, ok := s.outPermits.add(p, now)
	if !ok {
		p.Cancel()
		w.Header().Set("Retry-After", "1")
		writeProblem(w, &problem{Type: TypeOutboundWait, Title: "Too many permits", Status: http.StatusTooManyRequests,
			Detail: fmt.Sprintf("this server holds %d unreported permits, the most it holds; report or let some expire", s.outPermits.max)})
		return
	}
	writeJSON(w, http.StatusOK, contentJSON, permitJSON{Permit: id, Key: key, GrantedAt: formatTime(p.Granted()),
		ExpiresAt: formatTime(exp), WaitedMs: now.Sub(start).Milliseconds()})
}

// outboundError answers an error of outbound that is no refusal: a bad
// key is the caller's (422), anything else the store's (503).
func (s *Server) outboundError(w http.ResponseWriter, err error, ptr string) {
	switch {
	case errors.Is(err, outbound.ErrUnknownProfile):
		// Removed by a reload between the check and the call.
		writeProblem(w, invalid([]fieldError{{Pointer: "#/profile", kind: TypeUnknownProfile, Detail: err.Error()}}))
	case errors.Is(err, provider.ErrCostExceedsLimit):
		writeProblem(w, invalid([]fieldError{{Pointer: "#/cost", kind: TypeInvalidRequest, Detail: err.Error() + " (never retry it: make the call smaller)"}}))
	case errors.Is(err, store.ErrInvalidID), errors.Is(err, outbound.ErrEmptyKey), errors.Is(err, provider.ErrInvalidKey):
		writeProblem(w, invalid([]fieldError{{Pointer: ptr, kind: TypeInvalidRequest, Detail: err.Error()}}))
	case errors.Is(err, context.Canceled):
		s.log.Debug("server: outbound request cancelled by the client")
	default:
		s.log.Error("server: outbound rate store failed", "err", err)
		w.Header().Set("Retry-After", "1")
		writeProblem(w, &problem{Type: TypeStoreUnavailable, Title: "Rate store unavailable", Status: http.StatusServiceUnavailable,
			Detail: "the rate store could not decide; try again"})
	}
}

type outboundReportBody struct {
	Permit    string          `json:"permit"`
	Status    int             `json:"status"`
	Headers   json.RawMessage `json:"headers"`
	Body      *string         `json:"body"`
	Error     string          `json:"error"`
	LatencyMs *float64        `json:"latencyMs"`
	Attempt   int             `json:"attempt"`
}

// reportedHeader reports whether a report's header is one the signal
// parsers read: Retry-After, the IETF RateLimit fields, X-RateLimit-*,
// Binance's X-MBX-* and Shopify's X-Shopify-*. Others are ignored.
func reportedHeader(name string) bool {
	n := strings.ToLower(name)
	return n == "retry-after" || strings.HasPrefix(n, "ratelimit") || strings.HasPrefix(n, "x-ratelimit-") ||
		strings.HasPrefix(n, "x-mbx-") || strings.HasPrefix(n, "x-shopify-")
}

// reportErrors maps a report's error field onto the transport errors
// package signal classifies.
var reportErrors = map[string]error{
	"timeout":  context.DeadlineExceeded,
	"connect":  syscall.ECONNREFUSED, // not sent: dialing failed
	"network":  syscall.ECONNRESET,   // sent, then the connection broke
	"canceled": context.Canceled,
	"other":    errors.New("client error"),
}

type verdictJSON struct {
	Key          string  `json:"key"`
	PermitKnown  bool    `json:"permitKnown"`
	Class        string  `json:"class"`
	Throttled    bool    `json:"throttled"`
	Banned       bool    `json:"banned"`
	Unknown      bool    `json:"unknown"`
	Retry        bool    `json:"retry"`
	RetryAfterMs int64   `json:"retryAfterMs"`
	Stop         string  `json:"stop,omitempty"`
	Rate         float64 `json:"rate"`
	PausedForMs  int64   `json:"pausedForMs"`
	Profile      string  `json:"profile,omitempty"`
}

func stopReason(err error) string {
	for _, s := range []struct {
		err  error
		name string
	}{
		{retry.ErrBudgetExhausted, "budget_exhausted"}, {retry.ErrAttemptsExhausted, "attempts_exhausted"},
		{retry.ErrNotIdempotent, "not_idempotent"}, {retry.ErrDelayTooLong, "delay_too_long"},
		{outbound.ErrUnknownOutcome, "unknown_outcome"}, {outbound.ErrPermanent, "permanent"},
	} {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	if err != nil {
		return "other"
	}
	return ""
}

func (s *Server) outboundReport(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	var body outboundReportBody
	if p := s.readJSON(r, &body, "permit, and status or error, and optionally headers, body, latencyMs and attempt"); p != nil {
		writeProblem(w, p)
		return
	}
	var errs fieldErrs
	key, keyOK := permitKey(body.Permit)
	if body.Permit == "" {
		errs.add(TypeInvalidRequest, []string{"permit"}, "is required")
	} else if !keyOK {
		errs.add(TypeInvalidRequest, []string{"permit"}, "is not a permit this API issued")
	}
	var o outbound.Outcome
	switch {
	case body.Status != 0 && body.Error != "":
		errs.add(TypeInvalidRequest, []string{"error"}, "must be empty when status is given: a response has no transport error")
	case body.Status != 0:
		if body.Status < 100 || body.Status > 599 {
			errs.add(TypeInvalidRequest, []string{"status"}, "must be an HTTP status from 100 to 599, got %d", body.Status)
		}
		o.Status = body.Status
	case body.Error != "":
		if o.Err = reportErrors[body.Error]; o.Err == nil {
			errs.add(TypeInvalidRequest, []string{"error"}, "must be timeout, connect, network, canceled or other, got %q", truncate(body.Error, 32))
		}
	default:
		errs.add(TypeInvalidRequest, []string{"status"}, "is required, or error when there was no response")
	}
	if p := decodeHeaders(body.Headers, &o); p != nil {
		writeProblem(w, p)
		return
	}
	if body.Body != nil {
		if len(*body.Body) > MaxReportBody {
			errs.add(TypeInvalidRequest, []string{"body"}, "is %d bytes; at most %d are read (the GraphQL extensions and errors suffice)", len(*body.Body), MaxReportBody)
		}
		o.Body = []byte(*body.Body)
	}
	if body.LatencyMs != nil {
		if *body.LatencyMs < 0 || *body.LatencyMs > float64(24*time.Hour/time.Millisecond) {
			errs.add(TypeInvalidRequest, []string{"latencyMs"}, "must be from 0 to 86400000, got %v", *body.LatencyMs)
		} else {
			o.Latency = time.Duration(*body.LatencyMs * float64(time.Millisecond))
		}
	}
	if body.Attempt < 0 || body.Attempt > 1000 {
		errs.add(TypeInvalidRequest, []string{"attempt"}, "must be from 1 to 1000 (0 or absent: 1), got %d", body.Attempt)
	}
	o.Attempt = body.Attempt
	if len(errs) > 0 {
		writeProblem(w, invalid(errs))
		return
	}
	ctx := r.Context()
	p, found, done := s.outPermits.take(body.Permit, time.Now())
	var (
		v   outbound.Verdict
		err error
	)
	switch {
	case done:
		writeProblem(w, &problem{Type: TypePermitDone, Title: "Permit already reported", Status: http.StatusConflict,
			Detail: "this permit was reported before; each permit is reported once"})
		return
	case found:
		v, err = p.Report(ctx, o)
	default:
		// Expired here, or granted by another server of the fleet: the
		// outcome still teaches the key (its rate, the fleet's pause).
		v, err = s.outbound.Observe(ctx, key, o)
	}
	if err != nil {
		s.outboundError(w, err, "#/permit")
		return
	}
	writeJSON(w, http.StatusOK, contentJSON, verdictJSON{Key: key, PermitKnown: found, Class: v.Class,
		Throttled: v.Throttled, Banned: v.Banned, Unknown: v.Unknown, Retry: v.Retry,
		RetryAfterMs: ceilMillis(v.RetryAfter), Stop: stopReason(v.Stop), Rate: v.Rate, PausedForMs: ceilMillis(v.PausedFor),
		Profile: v.Profile})
}

// decodeHeaders reads a report's headers, {"Retry-After": "2"} or
// {"X-Foo": ["a", "b"]}, keeping those reportedHeader names.
func decodeHeaders(raw json.RawMessage, o *outbound.Outcome) *problem {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return malformed([]string{"headers"}, "headers must be an object of header names to a string or an array of strings")
	}
	for name, v := range m {
		var vals []string
		var one string
		if json.Unmarshal(v, &one) == nil {
			vals = []string{one}
		} else if json.Unmarshal(v, &vals) != nil {
			return malformed([]string{"headers", name}, "headers.%s must be a string or an array of strings", truncate(name, 64))
		}
		if !reportedHeader(name) {
			continue
		}
		if o.Header == nil {
			o.Header = http.Header{}
		}
		for _, val := range vals {
			o.Header.Add(name, val)
		}
	}
	return nil
}

func (s *Server) outboundSnapshot(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	var errs fieldErrs
	raw := r.PathValue("key")
	profile := r.URL.Query().Get("profile")
	key := s.outboundKey(&errs, raw, profile, "")
	if len(errs) > 0 {
		for i := range errs { // the key is in the path, the profile in the query
			errs[i].Pointer = strings.Replace(errs[i].Pointer, "#/key", "#/path/key", 1)
			errs[i].Pointer = strings.Replace(errs[i].Pointer, "#/profile", "#/query/profile", 1)
		}
		writeProblem(w, invalid(errs))
		return
	}
	snap, ok := s.outbound.KeySnapshot(key)
	if !ok {
		writeProblem(w, &problem{Type: TypeOutboundKeyUnknown, Title: "Unknown outbound key", Status: http.StatusNotFound,
			Detail: "this server holds no state for the key: no call went through it, or the key was idle and dropped (its pacing and pauses live on in the store)"})
		return
	}
	writeJSON(w, http.StatusOK, contentJSON, keySnapshotJSON{
		Key: snap.Key, InFlight: snap.InFlight, Rate: snap.Rate, Hint: snap.Hint, Probing: snap.Probing, Spacing: snap.Spacing,
		PausedForMs: ceilMillis(snap.PausedFor), AvgLatencyMs: ms(snap.AvgLatency), P95LatencyMs: ms(snap.P95Latency),
		Requests: snap.Requests, Successes: snap.Successes, Throttles: snap.Throttles, Errors: snap.Errors,
		Retries: snap.Retries, Rejected: snap.Rejected, LastActive: formatTime(snap.LastActive),
		Breaker: breakerJSON{State: snap.Breaker.State, Requests: snap.Breaker.Requests, Failures: snap.Breaker.Failures,
			ConsecutiveFailures: snap.Breaker.Consecutive, ErrorRate: snap.Breaker.ErrorRate,
			OpenForMs: ceilMillis(snap.Breaker.OpenFor), RetryTokens: snap.Breaker.RetryTokens},
	})
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

type keySnapshotJSON struct {
	Key          string      `json:"key"`
	InFlight     int64       `json:"inFlight"`
	Rate         float64     `json:"rate"`
	Hint         float64     `json:"hint"`
	Probing      bool        `json:"probing"`
	Spacing      float64     `json:"spacing"`
	PausedForMs  int64       `json:"pausedForMs"`
	AvgLatencyMs float64     `json:"avgLatencyMs"`
	P95LatencyMs float64     `json:"p95LatencyMs"`
	Requests     int64       `json:"requests"`
	Successes    int64       `json:"successes"`
	Throttles    int64       `json:"throttles"`
	Errors       int64       `json:"errors"`
	Retries      int64       `json:"retries"`
	Rejected     int64       `json:"rejected"`
	LastActive   string      `json:"lastActive"`
	Breaker      breakerJSON `json:"breaker"`
}

type breakerJSON struct {
	State               string  `json:"state"`
	Requests            int     `json:"requests"`
	Failures            int     `json:"failures"`
	ConsecutiveFailures int     `json:"consecutiveFailures"`
	ErrorRate           float64 `json:"errorRate"`
	OpenForMs           int64   `json:"openForMs"`
	RetryTokens         float64 `json:"retryTokens"`
}
