package rls

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/server"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

var t0 = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

type bundle struct {
	svc   *Service
	lim   *limiter.Limiter
	clock *clocktest.Clock
	reg   *prometheus.Registry
}

// setup parses yaml and builds a Service over a memstore on a fake clock.
func setup(t *testing.T, yaml string, cfg Config) *bundle {
	t.Helper()
	rules, err := Parse(File{Name: "test.yaml", Data: []byte(yaml)})
	require.NoError(t, err)
	st, c := memstoreAt(t0)
	return setupRules(t, rules, st, c, cfg)
}

func memstoreAt(at time.Time) (store.RateStore, *clocktest.Clock) {
	c := clocktest.New(at)
	return memstore.New(memstore.Config{Clock: c}), c
}

func setupRules(t testing.TB, rules *Rules, st store.RateStore, c *clocktest.Clock, cfg Config) *bundle {
	t.Helper()
	lim, err := limiter.New(limiter.Config{Store: st, Policies: rules.Policies()})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	cfg.Rules, cfg.Limiter, cfg.Registry = rules, lim, reg
	svc, err := New(cfg)
	require.NoError(t, err)
	return &bundle{svc: svc, lim: lim, clock: c, reg: reg}
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (b *bundle) ask(t *testing.T, domain string, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	resp, err := b.svc.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	require.NoError(t, err)
	require.Len(t, resp.Statuses, len(ds))
	return resp
}

const (
	ok   = pb.RateLimitResponse_OK
	over = pb.RateLimitResponse_OVER_LIMIT
)

func configText(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	require.NoError(t, err)
	return string(data)
}

// mongo_cps: 500 per second per database; GCRA refills one request every
// 2 ms, and never banks more than 500.
func TestDecideExampleConfig(t *testing.T) {
	t.Parallel()
	b := setup(t, configText(t, "testdata/envoy/example_config.yaml"), Config{})
	users := desc("database", "users")
	for i := range 500 {
		r := b.ask(t, "mongo_cps", 0, users)
		require.Equal(t, ok, r.OverallCode, "request %d", i)
		require.Equal(t, uint32(499-i), r.Statuses[0].LimitRemaining)
	}
	r := b.ask(t, "mongo_cps", 0, users)
	require.Equal(t, over, r.OverallCode)
	require.Equal(t, over, r.Statuses[0].Code)
	require.Equal(t, uint32(500), r.Statuses[0].CurrentLimit.RequestsPerUnit)
	require.Equal(t, pb.RateLimitResponse_RateLimit_SECOND, r.Statuses[0].CurrentLimit.Unit)
	require.Equal(t, int64(1), r.Statuses[0].DurationUntilReset.Seconds, "2 ms until the next, rounded up")
	// Another database is another limit.
	require.Equal(t, ok, b.ask(t, "mongo_cps", 0, desc("database", "default")).OverallCode)
	// No unit-edge refill: 2 ms later exactly one more passes.
	b.clock.Advance(2 * time.Millisecond)
	require.Equal(t, ok, b.ask(t, "mongo_cps", 0, users).OverallCode)
	require.Equal(t, over, b.ask(t, "mongo_cps", 0, users).OverallCode)
	// An idle second refills the whole burst, and no more.
	b.clock.Advance(10 * time.Second)
	r = b.ask(t, "mongo_cps", 0, users)
	require.Equal(t, uint32(499), r.Statuses[0].LimitRemaining)
	// A descriptor that matches nothing, and an unknown domain, limit nothing.
	r = b.ask(t, "mongo_cps", 0, desc("database", "other"))
	require.Equal(t, ok, r.OverallCode)
	require.Nil(t, r.Statuses[0].CurrentLimit)
	require.Equal(t, ok, b.ask(t, "nope", 0, users).OverallCode)
}

// The matching rules of envoyproxy/ratelimit's README and example config.
func TestMatching(t *testing.T) {
	t.Parallel()
	b := setup(t, configText(t, "testdata/envoy/example_example.yaml"), Config{})
	cases := []struct {
		name  string
		d     *ratelimitv3.RateLimitDescriptor
		limit uint32 // 0: no limit applies
		unit  pb.RateLimitResponse_RateLimit_Unit
	}{
		{"key and value", desc("source_cluster", "proxy", "destination_cluster", "mock"), 1, pb.RateLimitResponse_RateLimit_MINUTE},
		{"key only matches any value", desc("foo", "anything"), 2, pb.RateLimitResponse_RateLimit_MINUTE},
		{"nested key only", desc("foo", "x", "bar", "y"), 3, pb.RateLimitResponse_RateLimit_MINUTE},
		{"value before key", desc("foo", "x", "bar", "bkthomps"), 1, pb.RateLimitResponse_RateLimit_MINUTE},
		{"seconds", desc("foo", "x", "baz", "y"), 1, pb.RateLimitResponse_RateLimit_SECOND},
		{"deeper than the config", desc("category", "account", "x", "y"), 0, 0},
		{"shallower than the limit", desc("source_cluster", "proxy"), 0, 0},
		{"unknown key", desc("nope", "x"), 0, 0},
	}
	for _, c := range cases {
		r := b.ask(t, "rl", 0, c.d)
		if c.limit == 0 {
			require.Nil(t, r.Statuses[0].CurrentLimit, c.name)
			continue
		}
		require.NotNil(t, r.Statuses[0].CurrentLimit, c.name)
		require.Equal(t, c.limit, r.Statuses[0].CurrentLimit.RequestsPerUnit, c.name)
		require.Equal(t, c.unit, r.Statuses[0].CurrentLimit.Unit, c.name)
	}

	// unlimited: OK with MaxUint32 remaining, whatever the hits.
	r := b.ask(t, "rl", 1000, desc("qux", "x"))
	require.Equal(t, ok, r.OverallCode)
	require.Equal(t, uint32(math.MaxUint32), r.Statuses[0].LimitRemaining)
	require.Nil(t, r.Statuses[0].CurrentLimit)
	// requests_per_unit: 0 refuses everything.
	r = b.ask(t, "rl", 0, desc("foo", "x", "bar", "banned"))
	require.Equal(t, over, r.OverallCode)
	// shadow_mode: over the limit, answered OK.
	for range 5 {
		r = b.ask(t, "rl", 0, desc("foo", "x", "baz", "shady"))
		require.Equal(t, ok, r.OverallCode)
	}
	require.Equal(t, 2.0, testutil.ToFloat64(b.svc.metrics.shadow.WithLabelValues("rl", "foo.baz_shady")))
	require.Equal(t, 2.0, testutil.ToFloat64(b.svc.metrics.over.WithLabelValues("rl", "foo.baz_shady")))
	require.Equal(t, 3.0, testutil.ToFloat64(b.svc.metrics.within.WithLabelValues("rl", "foo.baz_shady")))
	require.Equal(t, 5.0, testutil.ToFloat64(b.svc.metrics.total.WithLabelValues("rl", "foo.baz_shady")))
}

// replaces: a limit named in a matched limit's replaces is not applied,
// and its budget is untouched.
func TestReplaces(t *testing.T) {
	t.Parallel()
	b := setup(t, configText(t, "testdata/envoy/readme_08_example7.yaml"), Config{})
	specific := desc("key_1", "value_1", "user", "bkthomps")
	general := desc("key_2", "value_2", "user", "bkthomps")
	for range 7 {
		r := b.ask(t, "example7", 0, specific, general)
		require.Equal(t, ok, r.OverallCode)
		require.Nil(t, r.Statuses[0].CurrentLimit, "replaced")
		require.Equal(t, uint32(10), r.Statuses[1].CurrentLimit.RequestsPerUnit)
	}
	r := b.ask(t, "example7", 0, specific)
	require.Equal(t, uint32(4), r.Statuses[0].LimitRemaining, "the 5/s limit was not charged while replaced")
}

// All or nothing: when one descriptor is over, the others are not charged.
func TestAllOrNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, configText(t, "testdata/envoy/readme_02_messaging.yaml"), Config{})
	marketing := desc("message_type", "marketing", "to_number", "2061111111")
	number := desc("to_number", "2061111111")
	for i := range 5 {
		r := b.ask(t, "messaging", 0, marketing, number)
		require.Equal(t, ok, r.OverallCode)
		require.Equal(t, uint32(99-i), r.Statuses[1].LimitRemaining)
	}
	for range 3 {
		r := b.ask(t, "messaging", 0, marketing, number)
		require.Equal(t, over, r.OverallCode)
		require.Equal(t, over, r.Statuses[0].Code)
		require.Equal(t, ok, r.Statuses[1].Code)
	}
	r := b.ask(t, "messaging", 0, number)
	require.Equal(t, uint32(94), r.Statuses[0].LimitRemaining, "refused requests charged nothing")
	// A descriptor refused without the store (requests_per_unit 0) keeps
	// the others uncharged too.
	b2 := setup(t, configText(t, "testdata/envoy/readme_03_edge_proxy_per_ip.yaml"), Config{})
	r = b2.ask(t, "edge_proxy_per_ip", 0, desc("remote_address", "50.0.0.5"), desc("remote_address", "50.0.0.1"))
	require.Equal(t, over, r.OverallCode)
	require.Equal(t, over, r.Statuses[0].Code)
	require.Equal(t, ok, r.Statuses[1].Code)
	require.Equal(t, uint32(10), r.Statuses[1].LimitRemaining)
}

func TestHitsAddend(t *testing.T) {
	t.Parallel()
	b := setup(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n", Config{})
	k := desc("k", "v")
	require.Equal(t, uint32(7), b.ask(t, "d", 3, k).Statuses[0].LimitRemaining)
	require.Equal(t, uint32(6), b.ask(t, "d", 0, k).Statuses[0].LimitRemaining, "0 means 1")
	peek := desc("k", "v")
	peek.HitsAddend = wrapperspb.UInt64(0)
	require.Equal(t, uint32(6), b.ask(t, "d", 5, peek).Statuses[0].LimitRemaining, "a descriptor's hits_addend 0 checks only")
	four := desc("k", "v")
	four.HitsAddend = wrapperspb.UInt64(4)
	require.Equal(t, uint32(2), b.ask(t, "d", 1, four).Statuses[0].LimitRemaining, "the descriptor's hits_addend wins")
	r := b.ask(t, "d", 3, k)
	require.Equal(t, over, r.OverallCode, "3 hits, 2 left")
	require.Equal(t, uint32(2), r.Statuses[0].LimitRemaining)
	r = b.ask(t, "d", 11, desc("k", "other"))
	require.Equal(t, over, r.OverallCode, "more hits than the limit can ever pass")
	negative := desc("k", "v")
	negative.IsNegativeHits = true
	require.Equal(t, uint32(2), b.ask(t, "d", 2, negative).Statuses[0].LimitRemaining, "refunds are checked, not charged")
}

func TestWildcardAndShareThreshold(t *testing.T) {
	t.Parallel()
	b := setup(t, configText(t, "testdata/envoy/readme_13_example11.yaml"), Config{})
	for i := range 10 {
		f := "files/" + string(rune('a'+i))
		require.Equal(t, ok, b.ask(t, "example11", 0, desc("files", f)).OverallCode)
	}
	require.Equal(t, over, b.ask(t, "example11", 0, desc("files", "files/z")).OverallCode, "all files/* share 10 per hour")
	for range 10 {
		require.Equal(t, ok, b.ask(t, "example11", 0, desc("files_no_share", "files_no_share/a")).OverallCode)
	}
	require.Equal(t, over, b.ask(t, "example11", 0, desc("files_no_share", "files_no_share/a")).OverallCode)
	require.Equal(t, ok, b.ask(t, "example11", 0, desc("files_no_share", "files_no_share/b")).OverallCode, "each value its own limit")
	// A wildcard matches its own key only.
	w := setup(t, "domain: d\ndescriptors:\n  - key: a\n    value: '*'\n    rate_limit: {unit: hour, requests_per_unit: 1}\n", Config{})
	require.NotNil(t, w.ask(t, "d", 0, desc("a", "x")).Statuses[0].CurrentLimit)
	require.Nil(t, w.ask(t, "d", 0, desc("a_b", "x")).Statuses[0].CurrentLimit)
}

func TestInvalidRequests(t *testing.T) {
	t.Parallel()
	b := setup(t, configText(t, "testdata/envoy/example_config.yaml"), Config{MaxDescriptors: 2})
	many := &ratelimitv3.RateLimitDescriptor{}
	for range MaxEntries + 1 {
		many.Entries = append(many.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	for name, req := range map[string]*pb.RateLimitRequest{
		"no domain":        {Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("database", "users")}},
		"no descriptors":   {Domain: "mongo_cps"},
		"too many":         {Domain: "mongo_cps", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a", "b"), desc("a", "b"), desc("a", "b")}},
		"too many entries": {Domain: "mongo_cps", Descriptors: []*ratelimitv3.RateLimitDescriptor{many}},
	} {
		_, err := b.svc.ShouldRateLimit(context.Background(), req)
		require.Equal(t, codes.InvalidArgument, status.Code(err), name)
	}
	require.Equal(t, 4.0, testutil.ToFloat64(b.svc.metrics.requests[codeInvalid]))
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	cfg := "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 3}\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 10}\n"
	headers := func(r *pb.RateLimitResponse) map[string]string {
		out := map[string]string{}
		for _, h := range r.ResponseHeadersToAdd {
			out[h.Key] = h.Value
		}
		return out
	}
	b := setup(t, cfg, Config{})
	r := b.ask(t, "d", 0, desc("a", "1"), desc("b", "1"))
	// The descriptor closest to its limit speaks: a, 2 of 3 left, full
	// again in 20 s.
	require.Equal(t, map[string]string{"x-ratelimit-limit": "3", "x-ratelimit-remaining": "2", "x-ratelimit-reset": "20"}, headers(r))
	b.ask(t, "d", 0, desc("a", "1"))
	b.ask(t, "d", 0, desc("a", "1"))
	r = b.ask(t, "d", 0, desc("b", "1"), desc("a", "1"))
	require.Equal(t, over, r.OverallCode)
	require.Equal(t, map[string]string{"x-ratelimit-limit": "3", "x-ratelimit-remaining": "0", "x-ratelimit-reset": "20"}, headers(r),
		"the refused descriptor speaks; the next request passes in 20 s")

	ietf := setup(t, cfg, Config{Headers: HeadersIETF})
	r = ietf.ask(t, "d", 0, desc("a", "1"))
	require.Equal(t, map[string]string{"ratelimit-policy": `"rls:d.a";q=3;w=60`, "ratelimit": `"rls:d.a";r=2;t=20`}, headers(r))
	both := setup(t, cfg, Config{Headers: HeadersBoth})
	require.Len(t, both.ask(t, "d", 0, desc("a", "1")).ResponseHeadersToAdd, 5)
	none := setup(t, cfg, Config{Headers: HeadersNone})
	require.Empty(t, none.ask(t, "d", 0, desc("a", "1")).ResponseHeadersToAdd)
	for _, s := range []string{"x-ratelimit", "ietf", "both", "none"} {
		m, err := ParseHeaderMode(s)
		require.NoError(t, err)
		require.Equal(t, s, m.String())
	}
	_, err := ParseHeaderMode("draft-03")
	require.ErrorContains(t, err, `unknown header mode "draft-03"`)
}

func TestNearLimitAndDetailedMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t, configText(t, "testdata/envoy/readme_09_example8.yaml"), Config{MaxDetailedSeries: 2})
	for range 10 {
		b.ask(t, "example8", 0, desc("key1", "a"))
	}
	b.ask(t, "example8", 0, desc("key1", "a"))
	m := b.svc.metrics
	// detailed_metric: the request's value is in the key.
	require.Equal(t, 10.0, testutil.ToFloat64(m.within.WithLabelValues("example8", "key1_a")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.over.WithLabelValues("example8", "key1_a")))
	require.Equal(t, 2.0, testutil.ToFloat64(m.near.WithLabelValues("example8", "key1_a")), "hits 9 and 10 of 10 are past 80%")
	b.ask(t, "example8", 0, desc("key1", "b"))
	b.ask(t, "example8", 0, desc("key1", "c"))
	require.Equal(t, 1.0, testutil.ToFloat64(m.total.WithLabelValues("example8", "key1_b")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.total.WithLabelValues("example8", "key1")), "past 2 series, the rule's key")
	require.Equal(t, 1.0, testutil.ToFloat64(m.capped))
	// A configured value is its rule's key.
	b.ask(t, "example8", 0, desc("key1", "value1"))
	require.Equal(t, 1.0, testutil.ToFloat64(m.total.WithLabelValues("example8", "key1_value1")))

	v := setup(t, configText(t, "testdata/envoy/readme_11_example10.yaml"), Config{})
	v.ask(t, "example10", 0, desc("route", "api", "http_method", "GET", "subject_id", "123"))
	require.Equal(t, 1.0, testutil.ToFloat64(v.svc.metrics.total.WithLabelValues("example10", "route_api.http_method_GET.subject_id")))
}

// The descriptors' state is the HTTP API's: a take on the rule's policy
// and the descriptor's key spends the same budget.
func TestSharedStateWithHTTPAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, configText(t, "testdata/envoy/readme_03_edge_proxy_per_ip.yaml"), Config{})
	srv, err := server.New(server.Config{Limiter: b.lim})
	require.NoError(t, err)
	for range 4 {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/v1/take",
			strings.NewReader(`{"policy":"rls:edge_proxy_per_ip.remote_address","key":"remote_address=50.0.0.1"}`))
		req.Header.Set("Content-Type", "application/json")
		srv.Handler().ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	}
	r := b.ask(t, "edge_proxy_per_ip", 0, desc("remote_address", "50.0.0.1"))
	require.Equal(t, uint32(5), r.Statuses[0].LimitRemaining, "10 - 4 over HTTP - 1 over gRPC")
}

func TestDescriptorKeys(t *testing.T) {
	t.Parallel()
	entries := func(kv ...string) []*ratelimitv3.RateLimitDescriptor_Entry { return desc(kv...).Entries }
	key := func(e []*ratelimitv3.RateLimitDescriptor_Entry) string {
		return descriptorKey(e, make([]*node, len(e)), make([]bool, len(e)))
	}
	require.Equal(t, "a=1&b=2", key(entries("a", "1", "b", "2")))
	require.NotEqual(t, key(entries("a", "1&b=2")), key(entries("a", "1", "b", "2")))
	require.Equal(t, "a%3D=x%25%26%0A", key(entries("a=", "x%&\n")))
	long := key(entries("k", strings.Repeat("é", 400)))
	require.LessOrEqual(t, len(long), store.MaxIDBytes)
	require.NoError(t, store.CheckKey(long))
	require.Contains(t, long, "#sha256:")
	require.NotEqual(t, long, key(entries("k", strings.Repeat("é", 401))))
	require.NoError(t, store.CheckKey(key(entries("k", "\u0085\xff"))))
}

func TestNewChecksLimiter(t *testing.T) {
	t.Parallel()
	rules, err := Parse(File{Name: "a.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")})
	require.NoError(t, err)
	lim, err := limiter.New(limiter.Config{})
	require.NoError(t, err)
	_, err = New(Config{Rules: rules, Limiter: lim})
	require.ErrorContains(t, err, "give it Rules.Policies()")
	_, err = New(Config{Rules: rules})
	require.ErrorContains(t, err, "Limiter is required")
	other, err := limiter.New(limiter.Config{Policies: []limiter.Policy{{Name: "rls:d.k", Rate: 2, Period: time.Second}}})
	require.NoError(t, err)
	_, err = New(Config{Rules: rules, Limiter: other})
	require.ErrorContains(t, err, "is not the one the rules define")
}

func TestLimitOverride(t *testing.T) {
	t.Parallel()
	b := setup(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100}\n  - key: tight\n    rate_limit: {unit: hour, requests_per_unit: 1}\n", Config{})
	withLimit := func(rpu uint32, unit typev3.RateLimitUnit, kv ...string) *ratelimitv3.RateLimitDescriptor {
		d := desc(kv...)
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
		return d
	}
	o := withLimit(2, typev3.RateLimitUnit_HOUR, "k", "v")
	for i := range 2 {
		r := b.ask(t, "d", 0, o)
		require.Equal(t, ok, r.OverallCode)
		require.Equal(t, uint32(2), r.Statuses[0].CurrentLimit.RequestsPerUnit, "the override, not the config's 100")
		require.Equal(t, uint32(1-i), r.Statuses[0].LimitRemaining)
	}
	require.Equal(t, over, b.ask(t, "d", 0, o).OverallCode)
	require.Equal(t, uint32(99), b.ask(t, "d", 0, desc("k", "v")).Statuses[0].LimitRemaining, "the configured limit is another")
	// Decided after the others: a refusal of theirs charges it nothing.
	o5 := withLimit(5, typev3.RateLimitUnit_HOUR, "k", "w")
	require.Equal(t, ok, b.ask(t, "d", 0, desc("tight", "x"), o5).OverallCode)
	r := b.ask(t, "d", 0, desc("tight", "x"), o5)
	require.Equal(t, over, r.OverallCode)
	require.Equal(t, uint32(4), r.Statuses[1].LimitRemaining, "checked, not charged")
	_, err := b.svc.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "d",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{withLimit(1, typev3.RateLimitUnit_UNKNOWN, "k", "v")}})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.ErrorContains(t, err, "unknown unit")
}
