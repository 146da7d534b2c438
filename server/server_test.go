package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/internal/testenv"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/server"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// testPolicies: "api" paces 10/s (one unit every 100ms) with bursts of 10;
// "strict" allows one unit a minute; "orders" is 5 per 10 s fixed window;
// "trial" is like strict but in shadow mode.
var testPolicies = []limiter.Policy{
	{Name: "api", Rate: 10, Period: time.Second, Burst: 10, Description: "general API"},
	{Name: "strict", Rate: 1, Period: time.Minute, Burst: 1},
	{Name: "orders", Algorithm: store.FixedWindow, Rate: 5, Period: 10 * time.Second},
	{Name: "trial", Rate: 1, Period: time.Minute, Shadow: true},
}

// start is aligned to 10 s windows, so a fixed window resets 10 s after it.
var start = time.Unix(1_700_000_000, 0)

type bundle struct {
	srv   *server.Server
	h     http.Handler
	clock *clocktest.Clock
	logs  *testenv.SyncBuffer
}

func setup(t *testing.T, cfg server.Config) *bundle {
	t.Helper()
	b := &bundle{clock: clocktest.New(start), logs: &testenv.SyncBuffer{}}
	if cfg.Limiter == nil {
		lim, err := limiter.New(limiter.Config{
			Store:    memstore.New(memstore.Config{Clock: b.clock}),
			Clock:    b.clock,
			Policies: testPolicies,
		})
		require.NoError(t, err)
		cfg.Limiter = lim
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(b.logs, nil))
	}
	srv, err := server.New(cfg)
	require.NoError(t, err)
	b.srv, b.h = srv, srv.Handler()
	return b
}

func (b *bundle) do(t *testing.T, method, path, contentType, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	b.h.ServeHTTP(rec, req)
	return rec
}

func (b *bundle) take(t *testing.T, body string) *httptest.ResponseRecorder {
	t.Helper()
	return b.do(t, http.MethodPost, "/v1/take", "application/json", body)
}

func (b *bundle) metrics(t *testing.T) string {
	t.Helper()
	rec := b.do(t, http.MethodGet, "/metrics", "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	return rec.Body.String()
}

type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Errors []struct {
		Pointer string `json:"pointer"`
		Detail  string `json:"detail"`
	} `json:"errors"`
}

func requireProblem(t *testing.T, rec *httptest.ResponseRecorder, status int, typ string) problemBody {
	t.Helper()
	require.Equal(t, status, rec.Code, rec.Body.String())
	require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
	var p problemBody
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), rec.Body.String())
	require.Equal(t, status, p.Status)
	require.Equal(t, typ, p.Type)
	require.NotEmpty(t, p.Title)
	require.NotEmpty(t, p.Detail)
	return p
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	b := setup(t, server.Config{})
	rec := b.do(t, http.MethodGet, "/healthz", "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	require.JSONEq(t, `{"status":"ok"}`, rec.Body.String())

	rec = b.do(t, http.MethodHead, "/healthz", "", "")
	require.Equal(t, http.StatusOK, rec.Code)
}

func TestPolicies(t *testing.T) {
	t.Parallel()
	b := setup(t, server.Config{})
	rec := b.do(t, http.MethodGet, "/v1/policies", "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	require.JSONEq(t, `{"policies":[
		{"name":"api","algorithm":"gcra","rate":10,"periodMs":1000,"burst":10,"shadow":false,"description":"general API"},
		{"name":"orders","algorithm":"fixed_window","rate":5,"periodMs":10000,"burst":0,"shadow":false,"description":""},
		{"name":"strict","algorithm":"gcra","rate":1,"periodMs":60000,"burst":1,"shadow":false,"description":""},
		{"name":"trial","algorithm":"gcra","rate":1,"periodMs":60000,"burst":1,"shadow":true,"description":""}
	]}`, rec.Body.String())
}

func TestTakeSingle(t *testing.T) {
	t.Parallel()
	b := setup(t, server.Config{})
	rec := b.do(t, http.MethodPost, "/v1/take", "application/json; charset=utf-8", `{"policy":"api","key":"user-1"}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	require.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
	require.Equal(t, `"api";q=10;w=1`, rec.Header().Get("RateLimit-Policy"))
	require.Equal(t, `"api";r=9;t=1`, rec.Header().Get("RateLimit"))
	require.Empty(t, rec.Header().Get("Retry-After"))
	require.Equal(t,
		`{"allowed":true,"policy":"api","limit":10,"remaining":9,"retryAfterMs":0,"resetAfterMs":100,"shadowed":false}`+"\n",
		rec.Body.String())

	// An explicit cost, and a peek (cost 0) that changes nothing.
	rec = b.take(t, `{"policy":"api","key":"user-1","cost":4}`)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, `"api";r=5;t=1`, rec.Header().Get("RateLimit"))
	for range 2 {
		rec = b.take(t, `{"policy":"api","key":"user-1","cost":0}`)
		require.Equal(t, http.StatusOK, rec.Code)
		require.JSONEq(t,
			`{"allowed":true,"policy":"api","limit":10,"remaining":5,"retryAfterMs":0,"resetAfterMs":500,"shadowed":false}`,
			rec.Body.String())
	}
}

func TestTakeDeniedRetryAfter(t *testing.T) {
	t.Parallel()
	b := setup(t, server.Config{})
	rec := b.take(t, `{"policy":"strict","key":"k"}`)
	require.Equal(t, http.StatusOK, rec.Code)

	rec = b.take(t, `{"policy":"strict","key":"k"}`)
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	require.Equal(t, "60", rec.Header().Get("Retry-After"))
	require.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
	require.Equal(t, `"strict";q=1;w=60`, rec.Header().Get("RateLimit-Policy"))
	require.Equal(t, `"strict";r=0;t=60`, rec.Header().Get("RateLimit"))
	require.JSONEq(t,
		`{"allowed":false,"policy":"strict","limit":1,"remaining":0,"retryAfterMs":60000,"resetAfterMs":60000,"shadowed":false}`,
		rec.Body.String())

	// Retry-After rounds up, and is never 0 on a denial.
	b.clock.Advance(59*time.Second + 500*time.Millisecond)
	rec = b.take(t, `{"policy":"strict","key":"k"}`)
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	require.Equal(t, "1", rec.Header().Get("Retry-After"))
	require.Equal(t, `"strict";r=0;t=1`, rec.Header().Get("RateLimit"))

	b.clock.Advance(500 * time.Millisecond)
	rec = b.take(t, `{"policy":"strict","key":"k"}`)
	require.Equal(t, http.StatusOK, rec.Code)
}

func TestTakeFixedWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, server.Config{})
	rec := b.take(t, `{"policy":"orders","key":"acct","cost":5}`)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, `"orders";q=5;w=10`, rec.Header().Get("RateLimit-Policy"))
	require.Equal(t, `"orders";r=0;t=10`, rec.Header().Get("RateLimit"))

	b.clock.Advance(2500 * time.Millisecond)
	rec = b.take(t, `{"policy":"orders","key":"acct"}`)
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	require.Equal(t, "8", rec.Header().Get("Retry-After"))
	require.JSONEq(t,
		`{"allowed":false,"policy":"orders","limit":5,"remaining":0,"retryAfterMs":7500,"resetAfterMs":7500,"shadowed":false}`,
		rec.Body.String())
}

func TestTakeShadow(t *testing.T) {
	t.Parallel()
	b := setup(t, server.Config{})
	require.Equal(t, http.StatusOK, b.take(t, `{"policy":"trial","key":"k"}`).Code)
	rec := b.take(t, `{"policy":"trial","key":"k"}`)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Empty(t, rec.Header().Get("Retry-After"))
	require.JSONEq(t,
		`{"allowed":true,"policy":"trial","limit":1,"remaining":0,"retryAfterMs":60000,"resetAfterMs":60000,"shadowed":true}`,
		rec.Body.String())
	m := b.metrics(t)
	require.Contains(t, m, `sluice_decisions_total{policy="trial",result="allowed"} 1`)
	require.Contains(t, m, `sluice_decisions_total{policy="trial",result="shadow_denied"} 1`)
}

func TestTakeMulti(t *testing.T) {
	t.Parallel()
	b := setup(t, server.Config{})
	rec := b.take(t, `{"items":[{"policy":"api","key":"ip-1","cost":2},{"policy":"orders","key":"acct-1"}]}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, `"api";q=10;w=1, "orders";q=5;w=10`, rec.Header().Get("RateLimit-Policy"))
	require.Equal(t, `"api";r=8;t=1, "orders";r=4;t=10`, rec.Header().Get("RateLimit"))
	require.JSONEq(t, `{"allowed":true,"retryAfterMs":0,"items":[
		{"allowed":true,"policy":"api","limit":10,"remaining":8,"retryAfterMs":0,"resetAfterMs":200,"shadowed":false},
		{"allowed":true,"policy":"orders","limit":5,"remaining":4,"retryAfterMs":0,"resetAfterMs":10000,"shadowed":false}
	]}`, rec.Body.String())

	// Two items of one policy: one list member, the least remaining.
	rec = b.take(t, `{"items":[{"policy":"api","key":"ip-1"},{"policy":"api","key":"ip-2","cost":0}]}`)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, `"api";q=10;w=1`, rec.Header().Get("RateLimit-Policy"))
	require.Equal(t, `"api";r=7;t=1`, rec.Header().Get("RateLimit"))
}

func TestTakeMultiAllOrNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, server.Config{})
	require.Equal(t, http.StatusOK, b.take(t, `{"policy":"strict","key":"k"}`).Code)

	rec := b.take(t, `{"items":[{"policy":"api","key":"k","cost":3},{"policy":"strict","key":"k"}]}`)
	require.Equal(t, http.StatusTooManyRequests, rec.Code, rec.Body.String())
	require.Equal(t, "60", rec.Header().Get("Retry-After"))
	require.Equal(t, `"api";q=10;w=1, "strict";q=1;w=60`, rec.Header().Get("RateLimit-Policy"))
	var got struct {
		Allowed      bool
		RetryAfterMs int64
		Items        []struct {
			Allowed bool
			Policy  string
		}
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
	require.False(t, got.Allowed)
	require.Equal(t, int64(60000), got.RetryAfterMs)
	require.Len(t, got.Items, 2)
	require.Equal(t, "api", got.Items[0].Policy)
	require.False(t, got.Items[1].Allowed)

	// Nothing was charged to api: a peek sees its whole burst.
	rec = b.take(t, `{"policy":"api","key":"k","cost":0}`)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, `"api";r=10;t=0`, rec.Header().Get("RateLimit"))

	m := b.metrics(t)
	require.Contains(t, m, `sluice_decisions_total{policy="api",result="denied"} 1`)
	require.Contains(t, m, `sluice_decisions_total{policy="strict",result="denied"} 1`)
}

func TestTakeBadInput(t *testing.T) {
	t.Parallel()
	manyItems := `{"items":[` + strings.Repeat(`{"policy":"api","key":"k"},`, 64) + `{"policy":"api","key":"k"}]}`
	const (
		malformed = server.TypeMalformedRequest
		invalid   = server.TypeInvalidRequest
	)
	tests := []struct {
		name        string
		contentType string
		body        string
		status      int
		typ         string
		detail      string // a substring of the detail
		pointers    []string
	}{
		{"truncated JSON", "", `{"policy":`, 400, malformed, "ends in the middle", nil},
		{"syntax error", "", `{"policy" "api"}`, 400, malformed, "malformed JSON at byte", nil},
		{"not JSON", "", `hello`, 400, malformed, "malformed JSON", nil},
		{"empty body", "", ``, 400, malformed, "body is empty", nil},
		{"trailing object", "", `{"policy":"api","key":"k"} {}`, 400, malformed, "data after the JSON object", nil},
		{"trailing garbage", "", `{"policy":"api","key":"k"}x`, 400, malformed, "data after the JSON object", nil},
		{"unknown field", "", `{"policy":"api","key":"k","colour":"red"}`, 400, malformed, `unknown field "colour"`, []string{"#/colour"}},
		{"unknown item field", "", `{"items":[{"policy":"api","key":"k"},{"policy":"api","key":"k","extra":1}]}`, 400, malformed, `unknown field "extra"`, []string{"#/items/1/extra"}},
		{"policy not a string", "", `{"policy":5,"key":"k"}`, 400, malformed, "policy must be a string", []string{"#/policy"}},
		{"item not an object", "", `{"items":[{"policy":"api","key":"k"},3]}`, 400, malformed, "items.1 must be an object", []string{"#/items/1"}},
		{"items not an array", "", `{"items":{}}`, 400, malformed, "items must be an array", []string{"#/items"}},
		{"body not an object", "", `[]`, 400, malformed, "request body must be an object", nil},
		{"text content type", "text/plain", `{"policy":"api","key":"k"}`, 415, "about:blank", "Content-Type must be application/json", nil},
		{"form content type", "application/x-www-form-urlencoded", `policy=api`, 415, "about:blank", "application/x-www-form-urlencoded", nil},
		{"no content type", "-", `{"policy":"api","key":"k"}`, 415, "about:blank", "has none", nil},
		{"empty key", "", `{"policy":"api","key":""}`, 422, invalid, "key is required", []string{"#/key"}},
		{"missing key", "", `{"policy":"api"}`, 422, invalid, "key is required", []string{"#/key"}},
		{"empty policy", "", `{"policy":"","key":"k"}`, 422, invalid, "policy is required", []string{"#/policy"}},
		{"unknown policy", "", `{"policy":"nope","key":"k"}`, 422, server.TypeUnknownPolicy, `unknown policy "nope"`, []string{"#/policy"}},
		{"negative cost", "", `{"policy":"api","key":"k","cost":-1}`, 422, invalid, "cost must not be negative", []string{"#/cost"}},
		{"fractional cost", "", `{"policy":"api","key":"k","cost":1.5}`, 422, invalid, "cost must be a whole number", []string{"#/cost"}},
		{"exponent cost", "", `{"policy":"api","key":"k","cost":1e3}`, 422, invalid, "cost must be a whole number", []string{"#/cost"}},
		{"string cost", "", `{"policy":"api","key":"k","cost":"5"}`, 422, invalid, "cost must be a JSON number", []string{"#/cost"}},
		{"bool cost", "", `{"policy":"api","key":"k","cost":true}`, 422, invalid, "cost must be a whole number", []string{"#/cost"}},
		{"cost above burst", "", `{"policy":"api","key":"k","cost":11}`, 422, server.TypeCostExceedsLimit, `cost is 11, above 10, the most policy "api" admits`, []string{"#/cost"}},
		{"cost above window limit", "", `{"items":[{"policy":"orders","key":"k","cost":6}]}`, 422, server.TypeCostExceedsLimit, "items.0.cost is 6, above 5", []string{"#/items/0/cost"}},
		{"cost over 2^53", "", `{"policy":"api","key":"k","cost":9007199254740993}`, 422, invalid, "cost is too large", []string{"#/cost"}},
		{"cost over int64", "", `{"policy":"api","key":"k","cost":100000000000000000000000000000}`, 422, invalid, "cost is too large", []string{"#/cost"}},
		{"too many items", "", manyItems, 422, invalid, "holds 65 items; at most 64", []string{"#/items"}},
		{"empty items", "", `{"items":[]}`, 422, invalid, "items must not be empty", []string{"#/items"}},
		{"single and items", "", `{"policy":"api","items":[{"policy":"api","key":"k"}]}`, 422, invalid, "not both", []string{"#/items"}},
		{"several item errors", "", `{"items":[{"policy":"api"},{"policy":"api","key":"k"},{"policy":"nope","key":"k","cost":-2}]}`, 422, invalid,
			"items.0.key is required", []string{"#/items/0/key", "#/items/2/policy", "#/items/2/cost"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, server.Config{})
			ct := tt.contentType
			switch ct {
			case "":
				ct = "application/json"
			case "-":
				ct = ""
			}
			rec := b.do(t, http.MethodPost, "/v1/take", ct, tt.body)
			p := requireProblem(t, rec, tt.status, tt.typ)
			require.Contains(t, p.Detail, tt.detail)
			var ptrs []string
			for _, e := range p.Errors {
				ptrs = append(ptrs, e.Pointer)
				require.NotEmpty(t, e.Detail)
			}
			require.Equal(t, tt.pointers, ptrs)
			if tt.status == http.StatusUnsupportedMediaType {
				require.Equal(t, "application/json", rec.Header().Get("Accept-Post"))
			}
			// Nothing was charged: api still has its whole burst.
			rec = b.take(t, `{"policy":"api","key":"k","cost":0}`)
			require.Equal(t, `"api";r=10;t=0`, rec.Header().Get("RateLimit"))
		})
	}
}

func TestTakeBodyTooLarge(t *testing.T) {
	t.Parallel()
	b := setup(t, server.Config{MaxBodyBytes: 256})
	body := `{"policy":"api","key":"` + strings.Repeat("k", 300) + `"}`
	rec := b.take(t, body)
	p := requireProblem(t, rec, http.StatusRequestEntityTooLarge, "about:blank")
	require.Contains(t, p.Detail, "larger than 256 bytes")

	// A body under the limit followed by more than the limit of trailing
	// data is also too large.
	rec = b.take(t, `{"policy":"api","key":"k"}`+strings.Repeat(" ", 300))
	requireProblem(t, rec, http.StatusRequestEntityTooLarge, "about:blank")
}

func TestMaxItems(t *testing.T) {
	t.Parallel()
	b := setup(t, server.Config{MaxItems: 2})
	rec := b.take(t, `{"items":[{"policy":"api","key":"a"},{"policy":"api","key":"b"}]}`)
	require.Equal(t, http.StatusOK, rec.Code)
	rec = b.take(t, `{"items":[{"policy":"api","key":"a"},{"policy":"api","key":"b"},{"policy":"api","key":"c"}]}`)
	p := requireProblem(t, rec, http.StatusUnprocessableEntity, server.TypeInvalidRequest)
	require.Contains(t, p.Detail, "at most 2")
}

func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	b := setup(t, server.Config{})
	tests := []struct{ method, path, allow string }{
		{http.MethodGet, "/v1/take", "POST"},
		{http.MethodPut, "/v1/take", "POST"},
		{http.MethodPost, "/v1/policies", "GET, HEAD"},
		{http.MethodDelete, "/healthz", "GET, HEAD"},
		{http.MethodPost, "/metrics", "GET, HEAD"},
	}
	for _, tt := range tests {
		rec := b.do(t, tt.method, tt.path, "application/json", `{}`)
		p := requireProblem(t, rec, http.StatusMethodNotAllowed, "about:blank")
		require.Equal(t, tt.allow, rec.Header().Get("Allow"), tt.method+" "+tt.path)
		require.Contains(t, p.Detail, "method "+tt.method+" is not allowed")
	}
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t, server.Config{})
	for _, path := range []string{"/", "/v1/nope", "/v1/take/extra"} {
		rec := b.do(t, http.MethodGet, path, "", "")
		p := requireProblem(t, rec, http.StatusNotFound, "about:blank")
		require.Contains(t, p.Detail, "no such endpoint")
	}
	require.Contains(t, b.metrics(t), `sluice_http_requests_total{code="404",route="other"} 3`)
}

func TestMetricsHaveNoKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, server.Config{})
	const secret = "secret-key-7f3a9c2e"
	require.Equal(t, http.StatusOK, b.take(t, `{"policy":"api","key":"`+secret+`"}`).Code)
	require.Equal(t, http.StatusOK, b.take(t, `{"policy":"strict","key":"`+secret+`"}`).Code)
	require.Equal(t, http.StatusTooManyRequests, b.take(t, `{"policy":"strict","key":"`+secret+`"}`).Code)
	require.Equal(t, http.StatusOK, b.take(t, `{"items":[{"policy":"api","key":"`+secret+`"}]}`).Code)
	// A policy name the server does not hold counts as "unknown".
	const bogus = "bogus-policy-0d1e"
	require.Equal(t, http.StatusUnprocessableEntity, b.take(t, `{"policy":"`+bogus+`","key":"`+secret+`"}`).Code)
	require.Equal(t, http.StatusUnprocessableEntity, b.take(t, `{"items":[{"policy":"`+bogus+`2","key":"k"}]}`).Code)

	m := b.metrics(t)
	require.NotContains(t, m, secret)
	require.NotContains(t, m, bogus)
	for _, want := range []string{
		`sluice_decisions_total{policy="api",result="allowed"} 2`,
		`sluice_decisions_total{policy="strict",result="allowed"} 1`,
		`sluice_decisions_total{policy="strict",result="denied"} 1`,
		`sluice_decisions_total{policy="orders",result="allowed"} 0`,
		`sluice_decisions_total{policy="unknown",result="error"} 2`,
		`sluice_decision_duration_seconds_count{policy="api"} 2`,
		`sluice_decision_duration_seconds_count{policy="strict"} 2`,
		`sluice_http_requests_total{code="200",route="/v1/take"} 3`,
		`sluice_http_requests_total{code="429",route="/v1/take"} 1`,
		`sluice_http_requests_total{code="422",route="/v1/take"} 2`,
		`go_goroutines`,
	} {
		require.Contains(t, m, want)
	}
	require.NotContains(t, b.logs.String(), secret)
}

func TestCallerRegistry(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	b := setup(t, server.Config{Registry: reg})
	require.Equal(t, http.StatusOK, b.take(t, `{"policy":"api","key":"k"}`).Code)
	m := b.metrics(t)
	require.Contains(t, m, `sluice_decisions_total{policy="api",result="allowed"} 1`)
	require.NotContains(t, m, "go_goroutines", "a caller's registry gets only the server's metrics")

	// A registry holds one server's metrics.
	_, err := server.New(server.Config{Limiter: newLimiter(t), Registry: reg})
	require.ErrorContains(t, err, "register metrics")
}

func TestNewConfig(t *testing.T) {
	t.Parallel()
	_, err := server.New(server.Config{})
	require.ErrorContains(t, err, "Limiter is required")
	_, err = server.New(server.Config{Limiter: newLimiter(t), MaxBodyBytes: -1})
	require.ErrorContains(t, err, "MaxBodyBytes")
	_, err = server.New(server.Config{Limiter: newLimiter(t), MaxItems: -1})
	require.ErrorContains(t, err, "MaxItems")
}

func newLimiter(t *testing.T) *limiter.Limiter {
	t.Helper()
	lim, err := limiter.New(limiter.Config{Policies: testPolicies})
	require.NoError(t, err)
	return lim
}

// faultStore is a RateStore whose every call fails with err, or panics
// when err is nil. Faults cannot be had from a real store on demand.
type faultStore struct{ err error }

func (f faultStore) fail() error {
	if f.err == nil {
		panic("faultStore: boom")
	}
	return f.err
}

func (f faultStore) Take(context.Context, store.TakeParams) (store.Result, error) {
	return store.Result{}, f.fail()
}

func (f faultStore) TakeAll(context.Context, store.TakeAllParams) (store.AllResult, error) {
	return store.AllResult{}, f.fail()
}

func (f faultStore) Settle(context.Context, store.SettleParams) (store.Result, error) {
	return store.Result{}, f.fail()
}

func (f faultStore) Sync(context.Context, store.SyncParams) (store.Result, error) {
	return store.Result{}, f.fail()
}
func (f faultStore) Reset(context.Context, store.ResetParams) error { return f.fail() }

func faultLimiter(t *testing.T, err error) *limiter.Limiter {
	t.Helper()
	lim, lerr := limiter.New(limiter.Config{Store: faultStore{err}, Policies: testPolicies})
	require.NoError(t, lerr)
	return lim
}

func TestStoreErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		err    error
		detail string
	}{
		{"unreachable", errors.New("redis: connection refused"), "could not decide"},
		{"full", fmt.Errorf("wrapped: %w", store.ErrTooManyKeys), "full of keys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, server.Config{Limiter: faultLimiter(t, tt.err)})
			for _, body := range []string{
				`{"policy":"api","key":"k"}`,
				`{"items":[{"policy":"api","key":"k"},{"policy":"orders","key":"k"}]}`,
			} {
				rec := b.take(t, body)
				p := requireProblem(t, rec, http.StatusServiceUnavailable, server.TypeStoreUnavailable)
				require.Contains(t, p.Detail, tt.detail)
				require.NotContains(t, p.Detail, "redis", "store internals stay in the log")
				require.Equal(t, "1", rec.Header().Get("Retry-After"))
			}
			m := b.metrics(t)
			require.Contains(t, m, `sluice_decisions_total{policy="api",result="error"} 2`)
			require.Contains(t, m, `sluice_http_requests_total{code="503",route="/v1/take"} 2`)
			require.Contains(t, b.logs.String(), "rate store failed")
		})
	}
}

func TestPanicRecovered(t *testing.T) {
	t.Parallel()
	b := setup(t, server.Config{Limiter: faultLimiter(t, nil)})
	rec := b.take(t, `{"policy":"api","key":"k"}`)
	p := requireProblem(t, rec, http.StatusInternalServerError, "about:blank")
	require.Contains(t, p.Detail, "internal error")
	require.Contains(t, b.logs.String(), "faultStore: boom")
	require.Contains(t, b.metrics(t), `sluice_http_requests_total{code="500",route="/v1/take"} 1`)

	// The server goes on serving.
	rec = b.do(t, http.MethodGet, "/healthz", "", "")
	require.Equal(t, http.StatusOK, rec.Code)
}

// TestOverHTTP runs the handler behind a real listener, so the
// MaxBytesReader and connection handling of net/http are in the loop.
func TestOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t, server.Config{MaxBodyBytes: 1024})
	ts := httptest.NewServer(b.h)
	t.Cleanup(ts.Close)

	resp, err := ts.Client().Post(ts.URL+"/v1/take", "application/json", strings.NewReader(`{"policy":"api","key":"k"}`))
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, `"api";r=9;t=1`, resp.Header.Get("RateLimit"))

	resp, err = ts.Client().Post(ts.URL+"/v1/take", "application/json", strings.NewReader(`{"policy":"api","key":"`+strings.Repeat("x", 4096)+`"}`))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
}
