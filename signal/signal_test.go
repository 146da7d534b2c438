package signal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// t0 is an arbitrary instant (2030-01-01T00:00:00Z) in Unix microseconds.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()

const (
	ms   = int64(1000)
	day  = 86400 * sec
	maxD = day
)

// A Retry-After that is an HTTP-date says so (Report.RetryAfterDate): what
// is left of its whole second is no exact wait (outbound holds a refusal's
// exact wait of a few milliseconds longer, so that the fleet hears of it,
// but not the end of a date's second).
func TestReportSaysARetryAfterWasAnHTTPDate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		h    http.Header
		date bool
	}{
		{hdr("Retry-After", "Tue, 01 Jan 2030 00:00:01 GMT"), true},
		{hdr("Retry-After", "Sun, 06 Nov 1994 08:49:37 GMT"), true},
		{hdr("Retry-After", "1"), false},
		{hdr("Retry-After", "0.004"), false},
		{hdr("Retry-After", "Tue, 01 Jan 2030 00:00:01 GMT", "Retry-After-Ms", "40"), false},
	} {
		rep := Parse(t0, Response{Status: 429, Header: tc.h})
		require.True(t, rep.HasRetryAfter, "%v", tc.h)
		require.Equal(t, tc.date, rep.RetryAfterDate, "%v", tc.h)
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v     string
		delay int64
		ok    bool
	}{
		{"120", 120 * sec, true},
		{"0", 0, true},
		{"  7\t", 7 * sec, true},
		{"007", 7 * sec, true},
		{"99999999999999999999999999", maxD, true}, // clamped, not ignored
		{"86401", maxD, true},
		// The three HTTP-date forms, 90 s after t0.
		{"Tue, 01 Jan 2030 00:01:30 GMT", 90 * sec, true},
		{"Tuesday, 01-Jan-30 00:01:30 GMT", 90 * sec, true},
		{"Tue Jan  1 00:01:30 2030", 90 * sec, true},
		// A date in the past is no delay; one far ahead is clamped.
		{"Sun, 06 Nov 1994 08:49:37 GMT", 0, true},
		{"Fri, 01 Jan 2100 00:00:00 GMT", maxD, true},
		// Garbage is ignored.
		{"", 0, false},
		{"-5", 0, false},
		{"+5", 0, false},
		// A decimal fraction is not RFC 9110, but Shopify sends "2.0".
		{"1.5", 1500 * ms, true},
		{"2.0", 2 * sec, true},
		{"0.0000019", 1, true},
		{"99999999999999999999.5", maxD, true},
		{"1.", 0, false},
		{".5", 0, false},
		{"1.5.0", 0, false},
		{"1,5", 0, false},
		{"1e3", 0, false},
		{"5s", 0, false},
		{"soon", 0, false},
		{"Tue, 01 Jan 2030 00:01:30 PST", 0, false},
		{"Tuesday, 01-Jan-30 00:01:30 PST", 0, false},
		// RFC 850's two-digit year is at most 50 years ahead of now
		// (2030): 79 is 2079 (clamped), 81 is 1981 (past), 94 is 1994.
		{"Sunday, 01-Jan-79 00:00:00 GMT", maxD, true},
		{"Wednesday, 01-Jan-81 00:00:00 GMT", 0, true},
		{"Sunday, 06-Nov-94 08:49:37 GMT", 0, true},
		{"Monday, 31-Dec-29 23:59:59 GMT", 0, true},
		{"2030-01-01T00:01:30Z", 0, false},
	} {
		d, ok := RetryAfter(tc.v, t0, maxD)
		require.Equal(t, tc.ok, ok, "%q", tc.v)
		require.Equal(t, tc.delay, d, "%q", tc.v)
	}
	// Late in a century the window wraps: in 2095, 45 is 2145 (ahead,
	// clamped) and 46 is 2046 (past).
	late := time.Date(2095, 6, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for v, want := range map[string]int64{"Sunday, 01-Jan-45 00:00:00 GMT": maxD, "Monday, 01-Jan-46 00:00:00 GMT": 0} {
		d, ok := RetryAfter(v, late, maxD)
		require.True(t, ok, v)
		require.Equal(t, want, d, v)
	}
}

func TestResetDelay(t *testing.T) {
	t.Parallel()
	epoch := t0 / sec
	for _, tc := range []struct {
		v     string
		delay int64
		ok    bool
	}{
		{"30", 30 * sec, true},                           // delta-seconds
		{"1.25", 1250 * ms, true},                        // delta with a fraction
		{"999999999", maxD, true},                        // still a delta, clamped
		{fmt.Sprint(epoch + 42), 42 * sec, true},         // Unix seconds
		{fmt.Sprint(epoch - 42), 0, true},                // a reset in the past
		{fmt.Sprint(epoch*1000 + 1500), 1500 * ms, true}, // Unix milliseconds
		{fmt.Sprint(epoch) + ".5", 500 * ms, true},
		{"Tue, 01 Jan 2030 00:00:10 GMT", 10 * sec, true},
		{"", 0, false},
		{"-1", 0, false},
		{"1.", 0, false},
		{".5", 0, false},
		{"1.2.3", 0, false},
		{"tomorrow", 0, false},
	} {
		d, ok := ResetDelay(tc.v, t0, maxD)
		require.Equal(t, tc.ok, ok, "%q", tc.v)
		require.Equal(t, tc.delay, d, "%q", tc.v)
	}
}

func TestShopifyCallLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v           string
		used, limit int64
		ok          bool
	}{
		{"32/40", 32, 40, true},
		{" 40 / 40 ", 40, 40, true},
		{"0/80", 0, 80, true},
		{"41/40", 0, 0, false},
		{"1/0", 0, 0, false},
		{"32", 0, 0, false},
		{"a/40", 0, 0, false},
		{"-1/40", 0, 0, false},
	} {
		u, l, ok := ShopifyCallLimit(tc.v)
		require.Equal(t, tc.ok, ok, "%q", tc.v)
		require.Equal(t, [2]int64{tc.used, tc.limit}, [2]int64{u, l}, "%q", tc.v)
	}
}

func TestBinanceInterval(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v  string
		w  int64
		ok bool
	}{
		{"1M", 60 * sec, true},
		{"1m", 60 * sec, true},
		{"10S", 10 * sec, true},
		{"1D", day, true},
		{"2h", 7200 * sec, true},
		{"0M", 0, false},
		{"M", 0, false},
		{"1Y", 0, false},
		{"-1M", 0, false},
	} {
		w, ok := BinanceInterval(tc.v)
		require.Equal(t, tc.ok, ok, "%q", tc.v)
		require.Equal(t, tc.w, w, "%q", tc.v)
	}
}

// hdr builds a canonical header from name/value pairs.
func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestParseIETF(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		h        http.Header
		policies []Policy
		headline Policy // Known, Limit, Remaining, ResetAfter, Window
	}{
		{
			name: "one policy",
			h:    hdr("RateLimit-Policy", `"burst";q=100;w=60`, "RateLimit", `"burst";r=50;t=30`),
			policies: []Policy{{Name: "burst", Source: SourceIETF, Known: FieldLimit | FieldWindow | FieldRemaining | FieldResetAfter,
				Limit: 100, Window: 60 * sec, Remaining: 50, ResetAfter: 30 * sec}},
			headline: Policy{Known: FieldLimit | FieldWindow | FieldRemaining | FieldResetAfter, Limit: 100, Window: 60 * sec, Remaining: 50, ResetAfter: 30 * sec},
		},
		{
			name: "two policies, the tighter is the headline",
			h: hdr("RateLimit-Policy", `"day";q=1000;w=86400, "burst";q=100;w=60;qu="requests"`,
				"RateLimit", `"day";r=3;t=7200, "burst";r=40;t=10`),
			policies: []Policy{
				{Name: "day", Source: SourceIETF, Known: FieldLimit | FieldWindow | FieldRemaining | FieldResetAfter, Limit: 1000, Window: day, Remaining: 3, ResetAfter: 7200 * sec},
				{Name: "burst", Source: SourceIETF, Known: FieldLimit | FieldWindow | FieldRemaining | FieldResetAfter, Limit: 100, Window: 60 * sec, Remaining: 40, ResetAfter: 10 * sec},
			},
			headline: Policy{Known: FieldLimit | FieldWindow | FieldRemaining | FieldResetAfter, Limit: 1000, Window: day, Remaining: 3, ResetAfter: 7200 * sec},
		},
		{
			name: "policies on two lines, as two fields joined",
			h:    hdr("RateLimit-Policy", `"a";q=10;w=1`, "RateLimit-Policy", `"b";q=20;w=2`, "RateLimit", `"b";r=0;t=2`),
			policies: []Policy{
				{Name: "a", Source: SourceIETF, Known: FieldLimit | FieldWindow, Limit: 10, Window: sec},
				{Name: "b", Source: SourceIETF, Known: FieldLimit | FieldWindow | FieldRemaining | FieldResetAfter, Limit: 20, Window: 2 * sec, ResetAfter: 2 * sec},
			},
			headline: Policy{Known: FieldLimit | FieldWindow | FieldRemaining | FieldResetAfter, Limit: 20, Window: 2 * sec, Remaining: 0, ResetAfter: 2 * sec},
		},
		{
			name: "escaped name, unknown params and a byte sequence key are fine",
			h:    hdr("RateLimit-Policy", `"a\"b";q=5;w=10;pk=:cHJvamVjdDEyMw==:;x=?1`, "RateLimit", `"a\"b";r=1;t=3;pk=:cHJvamVjdDEyMw==:`),
			policies: []Policy{{Name: `a"b`, Source: SourceIETF, Known: FieldLimit | FieldWindow | FieldRemaining | FieldResetAfter,
				Limit: 5, Window: 10 * sec, Remaining: 1, ResetAfter: 3 * sec}},
			headline: Policy{Known: FieldLimit | FieldWindow | FieldRemaining | FieldResetAfter, Limit: 5, Window: 10 * sec, Remaining: 1, ResetAfter: 3 * sec},
		},
		{
			name: "draft dictionary form with an unnamed policy",
			h:    hdr("RateLimit-Policy", `100;w=60`, "RateLimit", `limit=100, remaining=7, reset=12`),
			policies: []Policy{{Source: SourceIETF, Known: FieldLimit | FieldWindow | FieldRemaining | FieldResetAfter,
				Limit: 100, Window: 60 * sec, Remaining: 7, ResetAfter: 12 * sec}},
			headline: Policy{Known: FieldLimit | FieldWindow | FieldRemaining | FieldResetAfter, Limit: 100, Window: 60 * sec, Remaining: 7, ResetAfter: 12 * sec},
		},
		{
			name: "a field that does not parse is ignored as a whole",
			h:    hdr("RateLimit-Policy", `"a";q=10;w=1, `, "RateLimit", `"a";r=1;t=1, "b";r=1.`),
		},
		{
			name: "negative and non-integer values are ignored",
			h:    hdr("RateLimit-Policy", `"a";q=-1;w=1.5`, "RateLimit", `"a";r=-3;t="1"`),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rep := Parse(t0, Response{Status: 200, Header: tc.h})
			require.Equal(t, tc.policies, policies(rep))
			require.Equal(t, tc.headline, Policy{Known: rep.Known, Limit: rep.Limit, Remaining: rep.Remaining, ResetAfter: rep.ResetAfter, Window: rep.Window})
			if len(tc.policies) > 0 {
				require.Equal(t, SourceIETF, rep.Sources)
			} else {
				require.Zero(t, rep.Sources)
			}
		})
	}
}

func policies(rep Report) []Policy {
	if rep.NPolicies == 0 {
		return nil
	}
	return rep.Policies[:rep.NPolicies]
}

func TestParseLegacyAndXRateLimit(t *testing.T) {
	t.Parallel()
	epoch := t0 / sec
	for _, tc := range []struct {
		name string
		h    http.Header
		src  Source
		want Policy
	}{
		{"x-ratelimit epoch reset", hdr("X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "4987", "X-RateLimit-Reset", fmt.Sprint(epoch+300)),
			SourceXRateLimit, Policy{Source: SourceXRateLimit, Known: FieldLimit | FieldRemaining | FieldResetAfter, Limit: 5000, Remaining: 4987, ResetAfter: 300 * sec}},
		{"x-ratelimit delta reset", hdr("X-RateLimit-Limit", "60", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "17"),
			SourceXRateLimit, Policy{Source: SourceXRateLimit, Known: FieldLimit | FieldRemaining | FieldResetAfter, Limit: 60, Remaining: 0, ResetAfter: 17 * sec}},
		{"x-ratelimit millis reset and a policy suffix", hdr("X-RateLimit-Limit", "60, 60;w=60", "X-RateLimit-Reset", fmt.Sprint(epoch*1000+250)),
			SourceXRateLimit, Policy{Source: SourceXRateLimit, Known: FieldLimit | FieldResetAfter, Limit: 60, ResetAfter: 250 * ms}},
		{"x-rate-limit spelling", hdr("X-Rate-Limit-Remaining", "3"),
			SourceXRateLimit, Policy{Source: SourceXRateLimit, Known: FieldRemaining, Remaining: 3}},
		{"ietf legacy reset is always delta", hdr("RateLimit-Limit", "10", "RateLimit-Remaining", "2", "RateLimit-Reset", fmt.Sprint(epoch)),
			SourceIETFLegacy, Policy{Source: SourceIETFLegacy, Known: FieldLimit | FieldRemaining | FieldResetAfter, Limit: 10, Remaining: 2, ResetAfter: maxD}},
		{"reddit's decimal counts and delta reset", hdr("X-Ratelimit-Used", "4", "X-Ratelimit-Remaining", "596.0", "X-Ratelimit-Reset", "417"),
			SourceXRateLimit, Policy{Source: SourceXRateLimit, Known: FieldRemaining | FieldResetAfter, Remaining: 596, ResetAfter: 417 * sec}},
		{"under one left is none", hdr("X-Ratelimit-Remaining", "0.6", "X-Ratelimit-Reset", "3"),
			SourceXRateLimit, Policy{Source: SourceXRateLimit, Known: FieldRemaining | FieldResetAfter, Remaining: 0, ResetAfter: 3 * sec}},
		{"discord's reset-after wins over its epoch reset", hdr("X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "0",
			"X-RateLimit-Reset", fmt.Sprintf("%d.123", epoch+9), "X-RateLimit-Reset-After", "0.640"),
			SourceXRateLimit, Policy{Source: SourceXRateLimit, Known: FieldLimit | FieldRemaining | FieldResetAfter, Limit: 5, Remaining: 0, ResetAfter: 640 * ms}},
		{"a reset-after alone", hdr("X-RateLimit-Reset-After", "2"),
			SourceXRateLimit, Policy{Source: SourceXRateLimit, Known: FieldResetAfter, ResetAfter: 2 * sec}},
		{"openai's requests a minute, reset as a duration", hdr("X-Ratelimit-Limit-Requests", "60", "X-Ratelimit-Remaining-Requests", "59",
			"X-Ratelimit-Reset-Requests", "1s"),
			SourceXRateLimit, Policy{Name: "requests", Source: SourceXRateLimit, Known: FieldLimit | FieldRemaining | FieldResetAfter | FieldWindow,
				Limit: 60, Remaining: 59, ResetAfter: sec, Window: 60 * sec}},
		{"openai's tokens, reset in minutes", hdr("X-Ratelimit-Limit-Tokens", "150000", "X-Ratelimit-Remaining-Tokens", "0",
			"X-Ratelimit-Reset-Tokens", "6m0.5s"),
			SourceXRateLimit, Policy{Name: "tokens", Source: SourceXRateLimit, Known: FieldLimit | FieldRemaining | FieldResetAfter | FieldWindow,
				Limit: 150000, Remaining: 0, ResetAfter: 360*sec + 500*ms, Window: 60 * sec}},
		{"anthropic's requests, reset as a time", hdr("Anthropic-Ratelimit-Requests-Limit", "50", "Anthropic-Ratelimit-Requests-Remaining", "0",
			"Anthropic-Ratelimit-Requests-Reset", time.UnixMicro(t0+1200*ms).UTC().Format(time.RFC3339Nano)),
			SourceXRateLimit, Policy{Name: "requests", Source: SourceXRateLimit, Known: FieldLimit | FieldRemaining | FieldResetAfter | FieldWindow,
				Limit: 50, Remaining: 0, ResetAfter: 1200 * ms, Window: 60 * sec}},
		{"a reset that does not parse is dropped", hdr("X-Ratelimit-Remaining-Requests", "3", "X-Ratelimit-Reset-Requests", "a while"),
			SourceXRateLimit, Policy{Name: "requests", Source: SourceXRateLimit, Known: FieldRemaining | FieldWindow, Remaining: 3, Window: 60 * sec}},
		{"atlassian's reset as an RFC 3339 time", hdr("X-RateLimit-Limit", "100", "X-RateLimit-Remaining", "0",
			"X-RateLimit-Reset", time.UnixMicro(t0+90*sec).UTC().Format(time.RFC3339)),
			SourceXRateLimit, Policy{Source: SourceXRateLimit, Known: FieldLimit | FieldRemaining | FieldResetAfter, Limit: 100, Remaining: 0, ResetAfter: 90 * sec}},
		{"hubspot's calls per interval in milliseconds", hdr("X-HubSpot-RateLimit-Max", "100", "X-HubSpot-RateLimit-Remaining", "97",
			"X-HubSpot-RateLimit-Interval-Milliseconds", "10000"),
			SourceXRateLimit, Policy{Name: "interval", Source: SourceXRateLimit, Known: FieldLimit | FieldRemaining | FieldWindow, Limit: 100, Remaining: 97, Window: 10 * sec}},
		{"garbage is ignored field by field", hdr("X-RateLimit-Limit", "lots", "X-RateLimit-Remaining", "-4", "X-RateLimit-Reset", "9", "X-RateLimit-Reset-After", "soon"),
			SourceXRateLimit, Policy{Source: SourceXRateLimit, Known: FieldResetAfter, ResetAfter: 9 * sec}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rep := Parse(t0, Response{Status: 200, Header: tc.h})
			require.Equal(t, tc.src, rep.Sources)
			require.Equal(t, []Policy{tc.want}, policies(rep))
		})
	}
	rep := Parse(t0, Response{Status: 200, Header: hdr("X-HubSpot-RateLimit-Interval-Milliseconds", "10000")})
	require.Zero(t, rep.Sources, "an interval alone states no quota")
	require.Empty(t, policies(rep))
}

func TestParseStatusAndRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		status    int
		h         http.Header
		class     Class
		throttled bool
		banned    bool
		unknown   bool
		retry     int64
		hasRetry  bool
	}{
		{"200", 200, nil, ClassSuccess, false, false, false, 0, false},
		{"304", 304, nil, ClassSuccess, false, false, false, 0, false},
		{"429 with seconds", 429, hdr("Retry-After", "3"), ClassTransient, true, false, false, 3 * sec, true},
		{"429 with a date", 429, hdr("Retry-After", "Tue, 01 Jan 2030 00:00:05 GMT"), ClassTransient, true, false, false, 5 * sec, true},
		{"429 with nothing", 429, nil, ClassTransient, true, false, false, 0, false},
		{"429 with garbage", 429, hdr("Retry-After", "later"), ClassTransient, true, false, false, 0, false},
		{"503 with retry-after: refused", 503, hdr("Retry-After", "10"), ClassTransient, true, false, false, 10 * sec, true},
		{"503 bare: may have run", 503, nil, ClassTransient, true, false, true, 0, false},
		{"418 ban", 418, hdr("Retry-After", "120"), ClassTransient, true, true, false, 120 * sec, true},
		{"408", 408, nil, ClassTransient, false, false, false, 0, false},
		{"529 overloaded", 529, nil, ClassTransient, true, false, false, 0, false},
		{"429 with retry-after-ms: the exact wait wins", 429, hdr("Retry-After", "2", "Retry-After-Ms", "1500"), ClassTransient, true, false, false, 1500 * ms, true},
		{"429 with x-ms-retry-after-ms alone", 429, hdr("X-Ms-Retry-After-Ms", "37.5"), ClassTransient, true, false, false, 37500, true},
		{"429 with garbage retry-after-ms", 429, hdr("Retry-After", "2", "Retry-After-Ms", "soon"), ClassTransient, true, false, false, 2 * sec, true},
		{"500 may have run", 500, nil, ClassTransient, false, false, true, 0, false},
		{"502", 502, nil, ClassTransient, false, false, true, 0, false},
		{"504", 504, nil, ClassTransient, false, false, true, 0, false},
		{"501", 501, nil, ClassPermanent, false, false, false, 0, false},
		{"400", 400, nil, ClassPermanent, false, false, false, 0, false},
		{"401", 401, nil, ClassPermanent, false, false, false, 0, false},
		{"403", 403, nil, ClassPermanent, false, false, false, 0, false},
		{"403 with retry-after: a secondary limit", 403, hdr("Retry-After", "60"), ClassTransient, true, false, false, 60 * sec, true},
		{"403 with nothing remaining: a primary limit", 403, hdr("X-Ratelimit-Remaining", "0", "X-Ratelimit-Reset", "30"), ClassTransient, true, false, false, 0, false},
		{"403 with some remaining: permission", 403, hdr("X-Ratelimit-Remaining", "12", "X-Ratelimit-Reset", "30"), ClassPermanent, false, false, false, 0, false},
		{"401 with retry-after", 401, hdr("Retry-After", "60"), ClassPermanent, false, false, false, 60 * sec, true},
		{"404", 404, nil, ClassPermanent, false, false, false, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rep := Parse(t0, Response{Status: tc.status, Header: tc.h})
			require.Equal(t, tc.status, rep.Status)
			require.Equal(t, tc.class, rep.Class)
			require.Equal(t, tc.throttled, rep.Throttled)
			require.Equal(t, tc.banned, rep.Banned)
			require.Equal(t, tc.unknown, rep.Unknown)
			require.Equal(t, tc.retry, rep.RetryAfter)
			require.Equal(t, tc.hasRetry, rep.HasRetryAfter)
			require.Equal(t, tc.hasRetry, rep.Sources&SourceRetryAfter != 0)
		})
	}
}

// timeoutErr is a net.Error that timed out.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestClassifyError(t *testing.T) {
	t.Parallel()
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	read := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	for _, tc := range []struct {
		name             string
		err              error
		class            Class
		timeout, unknown bool
	}{
		{"canceled", context.Canceled, ClassCanceled, false, false},
		{"canceled in url.Error", &url.Error{Op: "Get", URL: "http://x", Err: context.Canceled}, ClassCanceled, false, false},
		{"deadline", context.DeadlineExceeded, ClassTransient, true, true},
		{"client timeout", &url.Error{Op: "Get", URL: "http://x", Err: timeoutErr{}}, ClassTransient, true, true},
		{"dial timeout was never sent", &net.OpError{Op: "dial", Err: timeoutErr{}}, ClassTransient, true, false},
		{"connection refused", &url.Error{Op: "Get", URL: "http://x", Err: dial}, ClassTransient, false, false},
		{"dns", &net.DNSError{Err: "no such host", Name: "x"}, ClassTransient, false, false},
		{"reset while reading", fmt.Errorf("wrap: %w", read), ClassTransient, false, true},
		{"unexpected eof", io.ErrUnexpectedEOF, ClassTransient, false, true},
		{"os deadline", os.ErrDeadlineExceeded, ClassTransient, true, true},
		{"not the network's doing", errors.New("bad scheme"), ClassPermanent, false, false},
		{"url.Error without a network cause", &url.Error{Op: "Get", URL: "x", Err: errors.New("unsupported protocol scheme")}, ClassPermanent, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, timeout, unknown := ClassifyError(tc.err)
			require.Equal(t, tc.class, c)
			require.Equal(t, tc.timeout, timeout)
			require.Equal(t, tc.unknown, unknown)
			require.Equal(t, tc.class, Classify(200, tc.err))
			rep := Parse(t0, Response{Status: 200, Header: hdr("Retry-After", "5"), Err: tc.err})
			require.Equal(t, Report{Class: tc.class, Timeout: tc.timeout, Unknown: tc.unknown}, rep, "an error has no response to read")
		})
	}
}

func TestParseShopify(t *testing.T) {
	t.Parallel()
	throttled := `{"errors":[{"message":"Throttled","extensions":{"code":"THROTTLED","documentation":"https://shopify.dev/api/usage/rate-limits"}}],
		"extensions":{"cost":{"requestedQueryCost":202,"actualQueryCost":null,"throttleStatus":{"maximumAvailable":2000.0,"currentlyAvailable":2,"restoreRate":100.0}}}}`
	ok := `{"data":{"shop":{"name":"x"}},"extensions":{"cost":{"requestedQueryCost":12,"actualQueryCost":7,"throttleStatus":{"maximumAvailable":1000.0,"currentlyAvailable":993,"restoreRate":50.0}}}}`
	for _, tc := range []struct {
		name         string
		status       int
		h            http.Header
		body         string
		class        Class
		throttled    bool
		retry        int64
		hasRetry     bool
		req, act     float64
		hasCost      bool
		restore      float64
		want         []Policy
		src          Source
		headlineLeft int64
	}{
		{name: "graphql success", status: 200, body: ok, class: ClassSuccess, req: 12, act: 7, hasCost: true, restore: 50,
			want: []Policy{{Source: SourceShopifyGraphQL, Known: FieldLimit | FieldRemaining | FieldUsed | FieldResetAfter, Limit: 1000, Remaining: 993, Used: 7, ResetAfter: 140 * ms}},
			src:  SourceShopifyGraphQL, headlineLeft: 993},
		{name: "graphql THROTTLED in a 200", status: 200, body: throttled, class: ClassTransient, throttled: true,
			retry: 2 * sec, hasRetry: true, req: 202, hasCost: true, restore: 100,
			want: []Policy{{Source: SourceShopifyGraphQL, Known: FieldLimit | FieldRemaining | FieldUsed | FieldResetAfter, Limit: 2000, Remaining: 2, Used: 1998, ResetAfter: 19980 * ms}},
			src:  SourceShopifyGraphQL, headlineLeft: 2},
		{name: "a Retry-After header wins over the bucket estimate", status: 200, h: hdr("Retry-After", "1"), body: throttled, class: ClassTransient, throttled: true,
			retry: sec, hasRetry: true, req: 202, hasCost: true, restore: 100,
			want: []Policy{{Source: SourceShopifyGraphQL, Known: FieldLimit | FieldRemaining | FieldUsed | FieldResetAfter, Limit: 2000, Remaining: 2, Used: 1998, ResetAfter: 19980 * ms}},
			src:  SourceShopifyGraphQL | SourceRetryAfter, headlineLeft: 2},
		{name: "max cost exceeded is permanent", status: 200, body: `{"errors":[{"extensions":{"code":"MAX_COST_EXCEEDED"}}]}`, class: ClassPermanent,
			src: SourceShopifyGraphQL},
		{name: "rest call limit", status: 200, h: hdr("X-Shopify-Shop-Api-Call-Limit", "39/40"), class: ClassSuccess,
			want: []Policy{{Source: SourceShopifyREST, Known: FieldLimit | FieldRemaining | FieldUsed, Limit: 40, Remaining: 1, Used: 39}},
			src:  SourceShopifyREST, headlineLeft: 1},
		{name: "rest 429", status: 429, h: hdr("X-Shopify-Shop-Api-Call-Limit", "40/40", "Retry-After", "2.0"), class: ClassTransient, throttled: true,
			retry: 2 * sec, hasRetry: true,
			want: []Policy{{Source: SourceShopifyREST, Known: FieldLimit | FieldRemaining | FieldUsed, Limit: 40, Remaining: 0, Used: 40}},
			src:  SourceShopifyREST | SourceRetryAfter},
		{name: "not json", status: 200, body: `<html>`, class: ClassSuccess},
		{name: "json without cost", status: 200, body: `{"data":{}}`, class: ClassSuccess},
		{name: "broken json", status: 200, body: `{"extensions":{"cost":`, class: ClassSuccess},
		{name: "negative numbers are absent", status: 200, body: `{"extensions":{"cost":{"requestedQueryCost":-1,"throttleStatus":{"maximumAvailable":-5,"currentlyAvailable":1,"restoreRate":1}}}}`, class: ClassSuccess},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rep := Parse(t0, Response{Status: tc.status, Header: tc.h, Body: []byte(tc.body)})
			require.Equal(t, tc.class, rep.Class)
			require.Equal(t, tc.throttled, rep.Throttled)
			require.Equal(t, tc.retry, rep.RetryAfter)
			require.Equal(t, tc.hasRetry, rep.HasRetryAfter)
			require.Equal(t, tc.req, rep.CostRequested)
			require.Equal(t, tc.act, rep.CostActual)
			require.Equal(t, tc.hasCost, rep.HasCost)
			require.Equal(t, tc.restore, rep.RestoreRate)
			require.Equal(t, tc.want, policies(rep))
			require.Equal(t, tc.src, rep.Sources)
			require.Equal(t, tc.headlineLeft, rep.Remaining)
		})
	}
}

func TestParseBinance(t *testing.T) {
	t.Parallel()
	h := hdr("X-MBX-USED-WEIGHT-1M", "1187", "X-MBX-USED-WEIGHT", "1187", "X-MBX-ORDER-COUNT-10S", "3",
		"X-MBX-ORDER-COUNT-1D", "250", "X-MBX-USED-WEIGHT-1Y", "5", "X-MBX-ORDER-COUNT-1M", "x", "X-MBX-USED-WEIGHTY", "1")
	rep := Parse(t0, Response{Status: 200, Header: h})
	require.Equal(t, SourceBinance, rep.Sources)
	require.Equal(t, []Policy{
		{Name: "weight", Source: SourceBinance, Known: FieldUsed, Used: 1187},
		{Name: "weight", Source: SourceBinance, Known: FieldUsed | FieldWindow, Used: 1187, Window: 60 * sec},
		{Name: "orders", Source: SourceBinance, Known: FieldUsed | FieldWindow, Used: 3, Window: 10 * sec},
		{Name: "orders", Source: SourceBinance, Known: FieldUsed | FieldWindow, Used: 250, Window: day},
	}, policies(rep))
	require.Zero(t, rep.Known, "usage alone is not a headline quota")

	ban := Parse(t0, Response{Status: 418, Header: hdr("Retry-After", "600", "X-MBX-USED-WEIGHT-1M", "2400")})
	require.True(t, ban.Banned)
	require.True(t, ban.Throttled)
	require.Equal(t, ClassTransient, ban.Class)
	require.Equal(t, 600*sec, ban.RetryAfter)

	// More headers than a Report keeps: always the same ones, whatever
	// the header map's order.
	h = hdr("X-MBX-USED-WEIGHT", "1", "X-MBX-USED-WEIGHT-1S", "2", "X-MBX-USED-WEIGHT-10S", "3", "X-MBX-USED-WEIGHT-1M", "4",
		"X-MBX-USED-WEIGHT-5M", "5", "X-MBX-USED-WEIGHT-1H", "6", "X-MBX-USED-WEIGHT-1D", "7", "X-MBX-ORDER-COUNT-10S", "8",
		"X-MBX-ORDER-COUNT-1M", "9", "X-MBX-ORDER-COUNT-1H", "10", "X-MBX-ORDER-COUNT-1D", "11")
	want := Parse(t0, Response{Status: 200, Header: h})
	require.Equal(t, MaxPolicies, want.NPolicies)
	for i, p := range policies(want) {
		require.Equal(t, int64(i+1), p.Used, "policy %d: %+v", i, p)
	}
	for range 50 {
		require.Equal(t, want, Parse(t0, Response{Status: 200, Header: h}))
	}
}

func TestParseMergesDialects(t *testing.T) {
	t.Parallel()
	// A gateway that sends both the IETF fields and X-RateLimit: the
	// tighter report is the headline, both are kept.
	h := hdr("RateLimit-Policy", `"p";q=100;w=60`, "RateLimit", `"p";r=20;t=30`,
		"X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "4", "X-RateLimit-Reset", "5", "Retry-After", "1")
	rep := Parse(t0, Response{Status: 200, Header: h})
	require.Equal(t, SourceIETF|SourceXRateLimit|SourceRetryAfter, rep.Sources)
	require.Equal(t, 2, rep.NPolicies)
	require.Equal(t, int64(4), rep.Remaining)
	require.Equal(t, int64(10), rep.Limit)
	require.Equal(t, 5*sec, rep.ResetAfter)
}

func TestNew(t *testing.T) {
	t.Parallel()
	_, err := New(Config{MaxDelay: -time.Second})
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "MaxDelay")
	_, err = New(Config{MaxDelay: time.Nanosecond})
	require.ErrorIs(t, err, ErrInvalidConfig)
	p, err := New(Config{MaxDelay: time.Minute})
	require.NoError(t, err)
	rep := p.Parse(t0, Response{Status: 429, Header: hdr("Retry-After", "3600")})
	require.Equal(t, 60*sec, rep.RetryAfter, "clamped to MaxDelay")
}

func TestParseHeaderDoesNotAllocate(t *testing.T) {
	h := hdr("RateLimit-Policy", `"day";q=1000;w=86400, "burst";q=100;w=60`, "RateLimit", `"day";r=3;t=7200, "burst";r=40;t=10`,
		"X-RateLimit-Limit", "60", "X-RateLimit-Remaining", "7", "X-RateLimit-Reset", "1893456000",
		"Retry-After", "Tue, 01 Jan 2030 00:01:30 GMT", "X-Shopify-Shop-Api-Call-Limit", "32/40", "X-MBX-USED-WEIGHT-1M", "10")
	p, err := New(Config{})
	require.NoError(t, err)
	var rep Report
	allocs := testing.AllocsPerRun(100, func() { p.ParseTo(&rep, t0, Response{Status: 429, Header: h}) })
	require.Zero(t, allocs)
	require.Equal(t, SourceIETF|SourceXRateLimit|SourceRetryAfter|SourceShopifyREST|SourceBinance, rep.Sources)
}

func TestReportPause(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		h      http.Header
		pause  int64
	}{
		{"retry-after wins", 429, hdr("Retry-After", "3", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "9"), 3 * sec},
		{"exhausted quota pauses until reset", 200, hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "9"), 9 * sec},
		{"quota left: no pause", 200, hdr("X-RateLimit-Remaining", "1", "X-RateLimit-Reset", "9"), 0},
		{"exhausted without a reset: no known pause", 200, hdr("X-RateLimit-Remaining", "0"), 0},
		{"nothing", 429, nil, 0},
	} {
		rep := Parse(t0, Response{Status: tc.status, Header: tc.h})
		require.Equal(t, tc.pause, rep.Pause(), tc.name)
	}
}

func TestHeadlineTies(t *testing.T) {
	t.Parallel()
	// Both policies are exhausted: the one that stays exhausted longer is
	// the headline, whichever comes first.
	for _, order := range [][2]string{{`"min";r=0;t=10`, `"hour";r=0;t=600`}, {`"hour";r=0;t=600`, `"min";r=0;t=10`}} {
		h := hdr("RateLimit-Policy", `"min";q=100;w=60, "hour";q=1000;w=3600`, "RateLimit", order[0]+", "+order[1])
		rep := Parse(t0, Response{Status: 429, Header: h})
		require.Equal(t, int64(0), rep.Remaining, order)
		require.Equal(t, 600*sec, rep.ResetAfter, order)
		require.Equal(t, 600*sec, rep.Pause(), order)
	}
}

func TestGraphQLThrottledByMessage(t *testing.T) {
	t.Parallel()
	// The throttle error as Shopify documents it, without a code.
	body := `{"errors":[{"message":"Throttled"}],"extensions":{"cost":{"requestedQueryCost":202,"actualQueryCost":null,"throttleStatus":{"maximumAvailable":1000.0,"currentlyAvailable":2,"restoreRate":50.0}}}}`
	rep := Parse(t0, Response{Status: 200, Body: []byte(body)})
	require.True(t, rep.Throttled)
	require.Equal(t, ClassTransient, rep.Class)
	require.Equal(t, 4*sec, rep.RetryAfter)
	// Other messages without a code are not throttling.
	rep = Parse(t0, Response{Status: 200, Body: []byte(`{"errors":[{"message":"Field 'x' doesn't exist"}]}`)})
	require.False(t, rep.Throttled)
	require.Equal(t, ClassSuccess, rep.Class)
}

func TestGraphQLThrottledWithRoomLeft(t *testing.T) {
	t.Parallel()
	// THROTTLED although the bucket holds the requested cost (another
	// limit refused it): no made-up wait from the bucket.
	body := `{"errors":[{"extensions":{"code":"THROTTLED"}}],"extensions":{"cost":{"requestedQueryCost":10,"actualQueryCost":null,"throttleStatus":{"maximumAvailable":1000.0,"currentlyAvailable":500,"restoreRate":50.0}}}}`
	rep := Parse(t0, Response{Status: 200, Body: []byte(body)})
	require.True(t, rep.Throttled)
	require.False(t, rep.HasRetryAfter)
	require.Zero(t, rep.RetryAfter)
}

// Discord states the exact wait in its 429's body (seconds with a
// fraction) and rounds the Retry-After header up to whole seconds.
func TestBodyRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		h      http.Header
		body   string
		want   int64
		has    bool
	}{
		{"the body's exact wait wins over the header's rounding", 429, hdr("Retry-After", "65"), `{"message": "You are being rate limited.", "retry_after": 64.57, "global": false}`, 64570 * ms, true},
		{"the body alone", 429, nil, `{"retry_after": 0.25}`, 250 * ms, true},
		{"a body in other units is not the header's wait", 429, hdr("Retry-After", "2"), `{"retry_after": 1500}`, 2 * sec, true},
		{"a body of another wait is not taken", 429, hdr("Retry-After", "5"), `{"retry_after": 1.5}`, 5 * sec, true},
		{"not a 429", 200, nil, `{"retry_after": 3}`, 0, false},
		{"not a number", 429, nil, `{"retry_after": "3"}`, 0, false},
		{"negative", 429, nil, `{"retry_after": -3}`, 0, false},
		{"not JSON", 429, hdr("Retry-After", "2"), `retry_after=1.5`, 2 * sec, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rep := Parse(t0, Response{Status: tc.status, Header: tc.h, Body: []byte(tc.body)})
			require.Equal(t, tc.has, rep.HasRetryAfter)
			require.Equal(t, tc.want, rep.RetryAfter)
		})
	}
}
