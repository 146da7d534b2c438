package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/aimd"
	"github.com/sluicerl/sluice/breaker"
	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/retry"
	"github.com/sluicerl/sluice/server"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// outboundSetup is a server with an outbound client on clk over st: a
// start far above any limit, no latency rule, so that only the upstream's
// answers slow a key down.
func outboundSetup(t *testing.T, clk *clocktest.Clock, st store.RateStore, cfg outbound.Config, scfg server.Config) *bundle {
	t.Helper()
	cfg.Clock, cfg.Store = clk, st
	if cfg.AIMD == (aimd.Config{}) {
		cfg.AIMD = aimd.Config{Start: 1e4, IgnoreLatency: true}
	}
	oc, err := outbound.New(cfg)
	require.NoError(t, err)
	scfg.Outbound = oc
	return setup(t, scfg)
}

type permitAnswer struct {
	Permit, Key, GrantedAt, ExpiresAt string
	WaitedMs                          int64
}

type waitAnswer struct {
	Type         string
	Status       int
	Key          string
	RetryAfterMs int64
	Paused, Busy bool
}

type verdictAnswer struct {
	Key                string
	PermitKnown        bool
	Class              string
	Throttled, Unknown bool
	Retry              bool
	RetryAfterMs       int64
	Stop               string
	Rate               float64
	PausedForMs        int64
	Banned             bool
}

// worker is what a worker in another language does per upstream call:
// acquire a permit, call the upstream only when granted, report what came
// back (status, the headers the signal parsers read, latency).
type worker struct {
	t        *testing.T
	b        *bundle
	upstream string
}

// step makes one turn of the loop: the acquire answer, and when granted,
// the report's verdict.
func (wk *worker) step(key string) (*httptest.ResponseRecorder, *verdictAnswer) {
	t := wk.t
	rec := wk.b.do(t, "POST", "/v1/outbound/acquire", "application/json", fmt.Sprintf(`{"key":%q}`, key))
	if rec.Code != http.StatusOK {
		return rec, nil
	}
	p := decodeAs[permitAnswer](t, rec.Body.Bytes())
	resp, err := http.Get(wk.upstream)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	headers := map[string][]string{}
	for k, v := range resp.Header {
		headers[k] = v
	}
	body, err := json.Marshal(map[string]any{"permit": p.Permit, "status": resp.StatusCode, "headers": headers, "latencyMs": 3.5})
	require.NoError(t, err)
	rep := wk.b.do(t, "POST", "/v1/outbound/report", "application/json", string(body))
	require.Equal(t, http.StatusOK, rep.Code, rep.Body.String())
	v := decodeAs[verdictAnswer](t, rep.Body.Bytes())
	return rec, &v
}

// scriptedUpstream answers each call with the next of statuses (the last
// one repeats), with a Retry-After of retryAfter on 429s, and counts calls.
func scriptedUpstream(t *testing.T, retryAfter string, statuses ...int) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := int(calls.Add(1))
		st := statuses[min(n, len(statuses))-1]
		if st == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.Header().Set("X-Unrelated", "ignored")
		w.WriteHeader(st)
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

// A worker loop over HTTP pauses on the upstream's 429 + Retry-After, and
// so does a worker behind another server sharing the store; neither calls
// the upstream until the pause is over.
func TestOutboundWorkerLoopPausesOnRetryAfter(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(start)
	st := memstore.New(memstore.Config{Clock: clk})
	up, calls := scriptedUpstream(t, "2", 429, 200)
	a := &worker{t: t, b: outboundSetup(t, clk, st, outbound.Config{Retry: retry.Config{MaxAttempts: 1}}, server.Config{}), upstream: up.URL}
	b := &worker{t: t, b: outboundSetup(t, clk, st, outbound.Config{}, server.Config{}), upstream: up.URL}
	key := "api.example.com"

	rec, v := a.step(key)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.NotNil(t, v)
	require.True(t, v.Throttled)
	require.True(t, v.PermitKnown)
	require.Equal(t, "transient", v.Class)
	require.EqualValues(t, 2000, v.PausedForMs)
	require.EqualValues(t, 1, calls.Load())

	for _, wk := range []*worker{a, b} {
		rec, v = wk.step(key)
		require.Nil(t, v, "granted during the pause")
		require.Equal(t, http.StatusTooManyRequests, rec.Code, rec.Body.String())
		require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
		require.Equal(t, "2", rec.Header().Get("Retry-After"))
		w := decodeAs[waitAnswer](t, rec.Body.Bytes())
		require.Equal(t, server.TypeOutboundWait, w.Type)
		require.True(t, w.Paused)
		require.Equal(t, key, w.Key)
		require.Greater(t, w.RetryAfterMs, int64(1000))
		require.LessOrEqual(t, w.RetryAfterMs, int64(2000))
	}
	require.EqualValues(t, 1, calls.Load(), "a worker called the upstream during the pause")

	clk.Advance(2 * time.Second)
	rec, v = b.step(key)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, "success", v.Class)
	require.EqualValues(t, 2, calls.Load())

	snap := b.b.do(t, "GET", "/v1/outbound/"+url.PathEscape(key), "", "")
	require.Equal(t, http.StatusOK, snap.Code, snap.Body.String())
	var s struct {
		Key       string
		Requests  int64
		Successes int64
		Breaker   struct{ State string }
	}
	require.NoError(t, json.Unmarshal(snap.Body.Bytes(), &s))
	require.Equal(t, key, s.Key)
	require.EqualValues(t, 1, s.Successes)
	require.Equal(t, "closed", s.Breaker.State)
}

// A storm of 5xx opens the key's breaker: acquire refuses with 503
// breaker-open (not a store outage) until it half-opens.
func TestOutboundBreakerOpensOn5xxStorm(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(start)
	up, calls := scriptedUpstream(t, "", 500)
	wk := &worker{t: t, upstream: up.URL, b: outboundSetup(t, clk, memstore.New(memstore.Config{Clock: clk}),
		outbound.Config{Breaker: breaker.Config{ConsecutiveFailures: 4, OpenTimeout: 30 * time.Second}}, server.Config{})}
	for i := range 4 {
		rec, v := wk.step("flaky")
		require.Equal(t, http.StatusOK, rec.Code, "call %d: %s", i+1, rec.Body.String())
		require.True(t, v.Unknown)
		require.Equal(t, "not_idempotent", v.Stop)
		clk.Advance(time.Second)
	}
	rec, v := wk.step("flaky")
	require.Nil(t, v)
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	w := decodeAs[waitAnswer](t, rec.Body.Bytes())
	require.Equal(t, server.TypeBreakerOpen, w.Type)
	require.EqualValues(t, 29000, w.RetryAfterMs)
	require.Equal(t, "29", rec.Header().Get("Retry-After"))
	require.EqualValues(t, 4, calls.Load())

	clk.Advance(29 * time.Second)
	rec, v = wk.step("flaky")
	require.Equal(t, http.StatusOK, rec.Code, "a half-open breaker lets a probe through: %s", rec.Body.String())
	require.NotNil(t, v)
	clk.Advance(10 * time.Second) // past the pacing of the rate the failures decreased
	rec, _ = wk.step("flaky")
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, "the failed probe opened it again")
}

// fakeProfiles knows one profile, "shopify", that lower-cases a shop's
// domain.
type fakeProfiles struct{}

func (fakeProfiles) OutboundKey(profile, key string) (string, error) {
	if profile != "shopify" {
		return "", fmt.Errorf("%w: %q", server.ErrUnknownProfile, profile)
	}
	if !strings.HasSuffix(strings.ToLower(key), ".myshopify.com") {
		return "", fmt.Errorf("want a shop domain ending in .myshopify.com")
	}
	return "shopify:" + strings.ToLower(key), nil
}

func TestOutboundRequestErrors(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(start)
	st := memstore.New(memstore.Config{Clock: clk})
	b := outboundSetup(t, clk, st, outbound.Config{Burst: 100}, server.Config{Profiles: fakeProfiles{}})
	other := outboundSetup(t, clk, st, outbound.Config{Burst: 100}, server.Config{})
	const js = "application/json"
	problemType := func(rec *httptest.ResponseRecorder) string {
		return decodeAs[struct{ Type string }](t, rec.Body.Bytes()).Type
	}
	for _, tt := range []struct {
		name, body string
		code       int
		typ, in    string
	}{
		{"no key", `{}`, 422, server.TypeInvalidRequest, "key is required"},
		{"control char", `{"key":"a\u0001b"}`, 422, server.TypeInvalidRequest, "key"},
		{"wait too long", `{"key":"k","waitMs":20001}`, 422, server.TypeInvalidRequest, "waitMs must be from 0 to 20000"},
		{"unknown field", `{"key":"k","weight":2}`, 400, server.TypeMalformedRequest, "weight"},
		{"unknown profile", `{"key":"k","profile":"nope"}`, 422, server.TypeUnknownProfile, "nope"},
		{"profile refuses key", `{"key":"k","profile":"shopify"}`, 422, server.TypeInvalidRequest, "myshopify.com"},
	} {
		rec := b.do(t, "POST", "/v1/outbound/acquire", js, tt.body)
		require.Equal(t, tt.code, rec.Code, "%s: %s", tt.name, rec.Body.String())
		require.Equal(t, tt.typ, problemType(rec), tt.name)
		require.Contains(t, rec.Body.String(), tt.in, tt.name)
	}
	rec := other.do(t, "POST", "/v1/outbound/acquire", js, `{"key":"k","profile":"shopify"}`)
	require.Equal(t, 422, rec.Code)
	require.Contains(t, rec.Body.String(), "holds no provider profiles")

	rec = b.do(t, "POST", "/v1/outbound/acquire", js, `{"key":"Shop-1.MyShopify.com","profile":"shopify","waitMs":0}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	p := decodeAs[permitAnswer](t, rec.Body.Bytes())
	require.Equal(t, "shopify:shop-1.myshopify.com", p.Key)

	for _, tt := range []struct {
		name, body string
		code       int
		in         string
	}{
		{"no permit", `{"status":200}`, 422, "permit is required"},
		{"forged permit", `{"permit":"zz","status":200}`, 422, "not a permit this API issued"},
		{"no status", fmt.Sprintf(`{"permit":%q}`, p.Permit), 422, "status is required"},
		{"bad status", fmt.Sprintf(`{"permit":%q,"status":99}`, p.Permit), 422, "from 100 to 599"},
		{"status and error", fmt.Sprintf(`{"permit":%q,"status":200,"error":"timeout"}`, p.Permit), 422, "error must be empty"},
		{"bad error", fmt.Sprintf(`{"permit":%q,"error":"boom"}`, p.Permit), 422, "timeout, connect, network"},
		{"bad headers", fmt.Sprintf(`{"permit":%q,"status":200,"headers":{"Retry-After":2}}`, p.Permit), 400, "string or an array"},
		{"negative latency", fmt.Sprintf(`{"permit":%q,"status":200,"latencyMs":-1}`, p.Permit), 422, "latencyMs"},
	} {
		rec := b.do(t, "POST", "/v1/outbound/report", js, tt.body)
		require.Equal(t, tt.code, rec.Code, "%s: %s", tt.name, rec.Body.String())
		require.Contains(t, rec.Body.String(), tt.in, tt.name)
	}
	// None of those used the permit up.
	body := fmt.Sprintf(`{"permit":%q,"status":200,"headers":{"X-Shopify-Shop-Api-Call-Limit":"39/40"},"body":"{}","attempt":1}`, p.Permit)
	rec = b.do(t, "POST", "/v1/outbound/report", js, body)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.True(t, decodeAs[verdictAnswer](t, rec.Body.Bytes()).PermitKnown)
	rec = b.do(t, "POST", "/v1/outbound/report", js, body)
	require.Equal(t, http.StatusConflict, rec.Code, rec.Body.String())
	require.Equal(t, server.TypePermitDone, problemType(rec))

	// A permit another server granted: its outcome still pauses the key
	// for the fleet.
	rec = b.do(t, "POST", "/v1/outbound/acquire", js, `{"key":"shared"}`)
	require.Equal(t, http.StatusOK, rec.Code)
	p = decodeAs[permitAnswer](t, rec.Body.Bytes())
	rec = other.do(t, "POST", "/v1/outbound/report", js, fmt.Sprintf(`{"permit":%q,"status":429,"headers":{"retry-after":["3"]}}`, p.Permit))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	v := decodeAs[verdictAnswer](t, rec.Body.Bytes())
	require.False(t, v.PermitKnown)
	require.True(t, v.Throttled)
	require.False(t, v.Retry)
	rec = b.do(t, "POST", "/v1/outbound/acquire", js, `{"key":"shared"}`)
	require.Equal(t, http.StatusTooManyRequests, rec.Code, rec.Body.String())
	require.True(t, decodeAs[waitAnswer](t, rec.Body.Bytes()).Paused)

	rec = b.do(t, "GET", "/v1/outbound/never-called", "", "")
	require.Equal(t, http.StatusNotFound, rec.Code)
	require.Equal(t, server.TypeOutboundKeyUnknown, problemType(rec))
	rec = b.do(t, "GET", "/v1/outbound/k?profile=nope", "", "")
	require.Equal(t, 422, rec.Code)
	require.Contains(t, rec.Body.String(), "#/query/profile")
}

// Without Config.Outbound the routes are not there.
func TestOutboundRoutesNeedAClient(t *testing.T) {
	t.Parallel()
	b := setup(t, server.Config{})
	rec := b.do(t, "POST", "/v1/outbound/acquire", "application/json", `{"key":"k"}`)
	require.Equal(t, http.StatusNotFound, rec.Code)
}

// Over the wire too, a 403 that states a rate limit (GitHub's secondary
// limit: 403 with Retry-After) is a throttle that pauses the key for the
// fleet, and a plain 403 is a permanent error that pauses nothing.
func TestOutboundReportOfA403OverARateLimit(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(start)
	st := memstore.New(memstore.Config{Clock: clk})
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "2")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"message":"You have exceeded a secondary rate limit."}`)
			return
		}
		w.WriteHeader(http.StatusForbidden)
	}))
	t.Cleanup(up.Close)
	wk := &worker{t: t, b: outboundSetup(t, clk, st, outbound.Config{Retry: retry.Config{MaxAttempts: 1}}, server.Config{}), upstream: up.URL}
	key := "api.github.example"
	rec, v := wk.step(key)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.NotNil(t, v)
	require.True(t, v.Throttled)
	require.Equal(t, "transient", v.Class)
	require.EqualValues(t, 2000, v.PausedForMs)
	rec, v = wk.step(key)
	require.Nil(t, v, "granted during the pause")
	require.Equal(t, http.StatusTooManyRequests, rec.Code, rec.Body.String())
	clk.Advance(2 * time.Second)
	rec, v = wk.step(key)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.NotNil(t, v)
	require.False(t, v.Throttled)
	require.Equal(t, "permanent", v.Class, "a 403 that states no limit")
	require.Zero(t, v.PausedForMs)
	require.EqualValues(t, 2, calls.Load())
}
