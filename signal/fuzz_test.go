package signal

import (
	"math"
	"net/http"
	"strings"
	"testing"
)

// checkReport checks the invariants every Report holds, whatever the
// input: delays within [0, max], counts not negative, at most MaxPolicies
// policies, and a headline that is one of the policies' values.
func checkReport(t *testing.T, rep Report, maxDelay int64) {
	t.Helper()
	if rep.RetryAfter < 0 || rep.RetryAfter > maxDelay || (!rep.HasRetryAfter && rep.RetryAfter != 0) {
		t.Fatalf("retry-after %d (has=%v) outside [0, %d]", rep.RetryAfter, rep.HasRetryAfter, maxDelay)
	}
	if rep.NPolicies < 0 || rep.NPolicies > MaxPolicies {
		t.Fatalf("%d policies", rep.NPolicies)
	}
	for _, p := range rep.Policies[:rep.NPolicies] {
		if p.Limit < 0 || p.Remaining < 0 || p.Used < 0 || p.Window < 0 {
			t.Fatalf("negative field in %+v", p)
		}
		if p.ResetAfter < 0 || p.ResetAfter > maxDelay {
			t.Fatalf("reset %d outside [0, %d] in %+v", p.ResetAfter, maxDelay, p)
		}
		if p.Source == 0 || p.Source&(p.Source-1) != 0 || rep.Sources&p.Source == 0 {
			t.Fatalf("policy source %b, report sources %b", p.Source, rep.Sources)
		}
	}
	if rep.Remaining < 0 || rep.Limit < 0 || rep.ResetAfter < 0 || rep.ResetAfter > maxDelay {
		t.Fatalf("bad headline %+v", rep)
	}
	if math.IsNaN(rep.RestoreRate) || rep.RestoreRate < 0 || math.IsNaN(rep.CostRequested) || rep.CostRequested < 0 ||
		math.IsNaN(rep.CostActual) || rep.CostActual < 0 {
		t.Fatalf("bad numbers %+v", rep)
	}
	if rep.Class < ClassSuccess || rep.Class > ClassCanceled {
		t.Fatalf("class %v", rep.Class)
	}
	if rep.Banned && !rep.Throttled {
		t.Fatal("banned but not throttled")
	}
}

func FuzzRetryAfter(f *testing.F) {
	f.Add("120", int64(0))
	f.Fuzz(func(t *testing.T, v string, off int64) {
		now := t0 + off%(400*day)
		d, ok := RetryAfter(v, now, maxD)
		if !ok {
			if d != 0 {
				t.Fatalf("ignored %q with delay %d", v, d)
			}
			return
		}
		if d < 0 || d > maxD {
			t.Fatalf("%q: delay %d outside [0, %d]", v, d, maxD)
		}
		// Surrounding whitespace never matters, and the value is a
		// delay: later instants never wait longer for a date, and a
		// number does not depend on now.
		if d2, ok2 := RetryAfter(" \t"+v+"\t ", now, maxD); !ok2 || d2 != d {
			t.Fatalf("%q: padded gives %d %v, want %d", v, d2, ok2, d)
		}
		// An RFC 850 date's century depends on now's year (RFC 9110
		// section 5.6.7), so at a new year it may jump; otherwise time
		// only shortens a delay.
		t1, ok1 := httpDate(trimOWS(v), now)
		t2, _ := httpDate(trimOWS(v), now+sec)
		if d3, _ := RetryAfter(v, now+sec, maxD); d3 > d && (!ok1 || t1.Equal(t2)) {
			t.Fatalf("%q: a second later the delay grew from %d to %d", v, d, d3)
		}
	})
}

func FuzzResetDelay(f *testing.F) {
	f.Add("1893456042", int64(0))
	f.Add("2030-01-01T00:00:00.25+02:00", int64(0))
	f.Fuzz(func(t *testing.T, v string, off int64) {
		now := t0 + off%(400*day)
		d, ok := ResetDelay(v, now, maxD)
		if !ok && d != 0 || d < 0 || d > maxD {
			t.Fatalf("%q: %d %v", v, d, ok)
		}
		if ok {
			if d3, _ := ResetDelay(v, now+sec, maxD); d3 > d {
				t.Fatalf("%q: a second later the delay grew from %d to %d", v, d, d3)
			}
		}
	})
}

// FuzzSFList checks the structured field parser: it never panics, member
// parameter spans are in range, a valid List parses the same in one line or
// split at its commas into several (as HTTP joins field lines), and an
// invalid one stays invalid with more text after it.
func FuzzSFList(f *testing.F) {
	f.Add(`"burst";q=100;w=60, "day";q=1000;w=86400`)
	f.Fuzz(func(t *testing.T, v string) {
		members, params, ok := parseSFList(v, nil, nil)
		if !ok {
			if _, _, ok2 := parseSFList(v+`, "x"`, nil, nil); ok2 && !strings.HasSuffix(strings.TrimRight(v, " \t"), ",") {
				t.Fatalf("%q invalid, but valid with a member appended", v)
			}
			return
		}
		for _, m := range members {
			if m.Lo < 0 || m.Lo > m.Hi || m.Hi > len(params) {
				t.Fatalf("%q: span [%d,%d) of %d params", v, m.Lo, m.Hi, len(params))
			}
			if m.Value.Kind == sfInteger && (m.Value.Int > 999_999_999_999_999 || m.Value.Int < -999_999_999_999_999) {
				t.Fatalf("%q: integer %d out of range", v, m.Value.Int)
			}
		}
		m2, p2, ok2 := parseSFLines([]string{v, v}, nil, nil, false)
		if !ok2 || (len(members) > 0 && len(m2) != 2*len(members)) || len(p2) != 2*len(params) {
			t.Fatalf("%q twice: ok=%v %d members, want %d", v, ok2, len(m2), 2*len(members))
		}
	})
}

func FuzzSFDictionary(f *testing.F) {
	f.Add(`limit=100, remaining=50, reset=30`)
	f.Fuzz(func(t *testing.T, v string) {
		members, params, ok := parseSFDictionary(v, nil, nil)
		if !ok {
			return
		}
		seen := map[string]bool{}
		for _, m := range members {
			if seen[m.Key] {
				t.Fatalf("%q: key %q twice", v, m.Key)
			}
			seen[m.Key] = true
			if m.Lo < 0 || m.Lo > m.Hi || m.Hi > len(params) {
				t.Fatalf("%q: bad span", v)
			}
		}
	})
}

// FuzzRateLimitHeaders fuzzes the IETF and X-RateLimit header values
// through Parse.
func FuzzRateLimitHeaders(f *testing.F) {
	f.Add(`"burst";q=100;w=60`, `"burst";r=50;t=30`, "100", "5", "1893456000")
	f.Add("", "", "60", "59.0", "6m0.5s")
	f.Add("", "", "50", "0", "2026-03-04T05:06:08.5Z")
	f.Fuzz(func(t *testing.T, policy, state, limit, remaining, reset string) {
		h := http.Header{}
		for k, v := range map[string]string{"Ratelimit-Policy": policy, "Ratelimit": state,
			"X-Ratelimit-Limit": limit, "X-Ratelimit-Remaining": remaining, "X-Ratelimit-Reset": reset,
			"Ratelimit-Reset": reset, "X-Ratelimit-Reset-After": reset, "Retry-After-Ms": reset,
			"X-Ratelimit-Limit-Requests": limit, "X-Ratelimit-Remaining-Requests": remaining, "X-Ratelimit-Reset-Requests": reset,
			"Anthropic-Ratelimit-Requests-Limit": limit, "Anthropic-Ratelimit-Requests-Remaining": remaining,
			"Anthropic-Ratelimit-Requests-Reset": reset, "X-Hubspot-Ratelimit-Max": limit,
			"X-Hubspot-Ratelimit-Remaining": remaining, "X-Hubspot-Ratelimit-Interval-Milliseconds": reset} {
			if v != "" {
				h[k] = []string{v}
			}
		}
		rep := Parse(t0, Response{Status: 200, Header: h})
		checkReport(t, rep, DefaultMaxDelay.Microseconds())
		if rep.Sources&^(SourceIETF|SourceXRateLimit|SourceIETFLegacy|SourceRetryAfter) != 0 {
			t.Fatalf("sources %b", rep.Sources)
		}
	})
}

func FuzzShopifyCallLimit(f *testing.F) {
	f.Add("32/40")
	f.Fuzz(func(t *testing.T, v string) {
		used, limit, ok := ShopifyCallLimit(v)
		if !ok {
			if used != 0 || limit != 0 {
				t.Fatalf("%q ignored with %d/%d", v, used, limit)
			}
			return
		}
		if limit <= 0 || used < 0 || used > limit {
			t.Fatalf("%q: %d/%d", v, used, limit)
		}
		rep := Parse(t0, Response{Status: 200, Header: http.Header{"X-Shopify-Shop-Api-Call-Limit": {v}}})
		checkReport(t, rep, DefaultMaxDelay.Microseconds())
		if rep.Remaining != limit-used || rep.Limit != limit {
			t.Fatalf("%q: report %d/%d", v, rep.Remaining, rep.Limit)
		}
	})
}

func FuzzShopifyGraphQL(f *testing.F) {
	f.Add([]byte(`{"extensions":{"cost":{"requestedQueryCost":12,"actualQueryCost":7,"throttleStatus":{"maximumAvailable":1000.0,"currentlyAvailable":993,"restoreRate":50.0}}}}`), 200)
	f.Fuzz(func(t *testing.T, body []byte, status int) {
		c, ok := ShopifyGraphQL(body)
		if !ok && c != (GraphQLCost{}) {
			t.Fatalf("ignored body with %+v", c)
		}
		if c.HasStatus && (c.Available > c.Maximum || c.Maximum <= 0) {
			t.Fatalf("status %+v", c)
		}
		rep := Parse(t0, Response{Status: status%600 + 100, Body: body})
		checkReport(t, rep, DefaultMaxDelay.Microseconds())
		if c.Throttled && !rep.Throttled {
			t.Fatal("THROTTLED body, report not throttled")
		}
		if c.Throttled && rep.Class == ClassSuccess {
			t.Fatal("THROTTLED body reported a success")
		}
	})
}

func FuzzBinanceHeaders(f *testing.F) {
	f.Add("X-MBX-USED-WEIGHT-1M", "1187", 418, "120")
	f.Fuzz(func(t *testing.T, key, value string, status int, retryAfter string) {
		h := http.Header{}
		h.Add(key, value)
		h.Set("Retry-After", retryAfter)
		rep := Parse(t0, Response{Status: status%600 + 100, Header: h})
		checkReport(t, rep, DefaultMaxDelay.Microseconds())
		for _, p := range rep.Policies[:rep.NPolicies] {
			if p.Source == SourceBinance && (p.Known&FieldUsed == 0 || p.Known&(FieldLimit|FieldRemaining) != 0) {
				t.Fatalf("binance policy %+v", p)
			}
		}
		if rep.Banned != (rep.Status == 418) {
			t.Fatalf("status %d banned=%v", rep.Status, rep.Banned)
		}
	})
}
