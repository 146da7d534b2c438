package server

import (
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicerl/sluice/limiter"
)

// The RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers are Structured Field lists (RFC 9651)
// of String items, one per policy, with integer parameters:
//
//	RateLimit-Policy: "api";q=100;w=60
//	RateLimit: "api";r=42;t=17
//
// q is the quota per window of w seconds, r the quota remaining and t the
// seconds until the key is back to its full quota, rounded up.

// maxSFInteger is the largest Structured Field integer (15 digits).
const maxSFInteger = 999_999_999_999_999

// policyHeaderItem returns the RateLimit-Policy list member of p: q = rate,
// w = period in seconds. A period that is not a whole number of seconds is
// stated over the next whole second with the quota scaled down (rounded
// down), so a client that follows it never exceeds the policy.
func policyHeaderItem(p limiter.Policy) string {
	const second = int64(time.Second / time.Microsecond)
	period := p.Period.Microseconds()
	q, w := p.Rate, period/second
	if period%second != 0 {
		w++
		// q = floor(rate * w*1s / period) without overflow.
		n := new(big.Int).Mul(big.NewInt(p.Rate), big.NewInt(w*second))
		n.Quo(n, big.NewInt(period))
		q = maxSFInteger
		if n.IsInt64() {
			q = n.Int64()
		}
	}
	var b strings.Builder
	writeSFString(&b, p.Name)
	b.WriteString(";q=")
	b.WriteString(strconv.FormatInt(sfInteger(q), 10))
	b.WriteString(";w=")
	b.WriteString(strconv.FormatInt(sfInteger(w), 10))
	return b.String()
}

// rateLimitItem returns the RateLimit list member for a decision.
func rateLimitItem(d limiter.Decision) string {
	var b strings.Builder
	writeSFString(&b, d.Policy)
	b.WriteString(";r=")
	b.WriteString(strconv.FormatInt(sfInteger(d.Remaining), 10))
	b.WriteString(";t=")
	b.WriteString(strconv.FormatInt(sfInteger(ceilSeconds(d.ResetAfter)), 10))
	return b.String()
}

// setRateLimitHeaders sets RateLimit-Policy (one member per policy) and
// RateLimit (one member per policy: the least remaining and the latest
// reset among the decisions of that policy).
func (s *Server) setRateLimitHeaders(lv *live, h http.Header, ds []limiter.Decision) {
	var policies, limits []string
	seen := make(map[string]int, len(ds))
	merged := make([]limiter.Decision, 0, len(ds))
	for _, d := range ds {
		if i, ok := seen[d.Policy]; ok {
			merged[i].Remaining = min(merged[i].Remaining, d.Remaining)
			merged[i].ResetAfter = max(merged[i].ResetAfter, d.ResetAfter)
			continue
		}
		seen[d.Policy] = len(merged)
		merged = append(merged, d)
		if info := lv.policies[d.Policy]; info != nil {
			policies = append(policies, info.header)
		}
	}
	for _, d := range merged {
		limits = append(limits, rateLimitItem(d))
	}
	h.Set("RateLimit-Policy", strings.Join(policies, ", "))
	h.Set("RateLimit", strings.Join(limits, ", "))
}

// writeSFString writes s as a Structured Field String: printable ASCII,
// with '"' and '\' escaped. Other bytes cannot be represented and are
// replaced by '?'; policy names never contain them.
func writeSFString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

func sfInteger(n int64) int64 { return min(max(n, 0), maxSFInteger) }

// ceilSeconds rounds d up to whole seconds; negative durations are 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	n := int64(d / time.Second)
	if d%time.Second != 0 {
		n++
	}
	return n
}

// ceilMillis rounds d up to whole milliseconds; negative durations are 0.
func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	n := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		n++
	}
	return n
}

// retryAfterSeconds is the Retry-After delta-seconds for a denial: d
// rounded up, and at least 1.
func retryAfterSeconds(d time.Duration) string {
	return strconv.FormatInt(max(ceilSeconds(d), 1), 10)
}
