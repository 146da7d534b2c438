package signal

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

const sec = int64(time.Second / time.Microsecond)

// clampDelay clamps d microseconds to [0, maxDelay].
func clampDelay(d, maxDelay int64) int64 {
	return min(max(d, 0), maxDelay)
}

// secondsToMicros converts whole seconds to microseconds, saturating
// instead of overflowing; callers clamp the result.
func secondsToMicros(s int64) int64 {
	if s > (1<<62)/sec {
		return 1 << 62
	}
	if s < -(1<<62)/sec {
		return -(1 << 62)
	}
	return s * sec
}

// digits parses s as 1*DIGIT (no sign, no spaces), saturating at 2^62 so
// that a huge value still clamps instead of being ignored.
func digits(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isDigit(c) {
			return 0, false
		}
		if n < 1<<58 {
			n = n*10 + int64(c-'0')
		} else {
			n = 1 << 62
		}
	}
	return n, true
}

// trimOWS trims the optional whitespace (SP, HTAB) of RFC 9110.
func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// RetryAfter parses a Retry-After value at now (Unix microseconds): either
// delay-seconds (1*DIGIT) or an HTTP-date in any of the three forms RFC 9110
// section 5.6.7 requires recipients to accept: IMF-fixdate ("Sun, 06 Nov
// 1994 08:49:37 GMT"), RFC 850 ("Sunday, 06-Nov-94 08:49:37 GMT") and ANSI C
// asctime ("Sun Nov  6 08:49:37 1994"). Seconds with a decimal fraction
// ("2.0", as Shopify sends) are accepted too, although RFC 9110 has none:
// ignoring a provider's explicit wait would be worse. It returns the delay
// in microseconds clamped to [0, maxDelay] (a date in the past is a delay
// of 0) and ok; anything else (a sign, an exponent, a unit, garbage) is
// ignored with ok false.
func RetryAfter(v string, now, maxDelay int64) (delay int64, ok bool) {
	delay, _, ok = retryAfter(v, now, maxDelay)
	return delay, ok
}

// retryAfter is RetryAfter, and also reports whether v was an HTTP-date.
func retryAfter(v string, now, maxDelay int64) (delay int64, date, ok bool) {
	v = trimOWS(v)
	if d, ok := deltaSeconds(v, maxDelay); ok {
		return d, false, true
	}
	t, ok := httpDate(v, now)
	if !ok {
		return 0, false, false
	}
	return clampDelay(untilMicros(t, now), maxDelay), true, true
}

var retryAfterField = []byte(`"retry_after"`)

// bodyRetryAfter reads the wait a 429's JSON body states in seconds, with
// a fraction (Discord: {"retry_after": 64.57}), where its Retry-After
// header rounds it up to whole seconds. With such a header the body wins
// only when it is that wait to the second (a body in other units, or of
// another wait, is not taken); without one it is the wait.
func (p *Parser) bodyRetryAfter(rep *Report, body []byte) {
	if !bytes.Contains(body, retryAfterField) {
		return
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return
	}
	var b struct {
		RetryAfter *float64 `json:"retry_after"`
	}
	if json.Unmarshal(body, &b) != nil {
		return
	}
	v, ok := finite(b.RetryAfter)
	if !ok {
		return
	}
	d := secondsDelay(v, p.maxDelay)
	if rep.HasRetryAfter && (d > rep.RetryAfter || d <= rep.RetryAfter-sec) {
		return
	}
	rep.RetryAfter, rep.HasRetryAfter, rep.RetryAfterDate = d, true, false
	rep.Sources |= SourceRetryAfter
}

// decimalSeconds parses 1*DIGIT "." 1*DIGIT seconds into microseconds,
// truncating the fraction and saturating like secondsToMicros.
func decimalSeconds(v string) (int64, bool) {
	whole, frac, ok := strings.Cut(v, ".")
	if !ok || frac == "" {
		return 0, false
	}
	n, ok := digits(whole)
	if !ok {
		return 0, false
	}
	var f int64
	for i := 0; i < len(frac); i++ {
		c := frac[i]
		if !isDigit(c) {
			return 0, false
		}
		if i < 6 {
			f = f*10 + int64(c-'0')
		}
	}
	for i := len(frac); i < 6; i++ {
		f *= 10
	}
	return secondsToMicros(n) + f, true
}

// rfc850 is the RFC 850 date form with its zone fixed to GMT, the only
// one RFC 9110 allows.
const rfc850 = "Monday, 02-Jan-06 15:04:05 GMT"

// httpDate parses the three HTTP-date forms at now (Unix microseconds); it
// does not allocate on success. An RFC 850 date's two-digit year is read as
// RFC 9110 section 5.6.7 requires: the year with those last two digits at
// most 50 years after now's (and less than 50 before), not by a fixed
// pivot.
func httpDate(v string, now int64) (time.Time, bool) {
	if len(v) < 20 || len(v) > 40 {
		return time.Time{}, false
	}
	if t, err := time.Parse(http.TimeFormat, v); err == nil {
		return t, true
	}
	if t, err := time.Parse(rfc850, v); err == nil {
		nowYear := time.UnixMicro(now).UTC().Year()
		year := nowYear - nowYear%100 + t.Year()%100
		switch {
		case year > nowYear+50:
			year -= 100
		case year <= nowYear-50:
			year += 100
		}
		return time.Date(year, t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC), true
	}
	if t, err := time.Parse(time.ANSIC, v); err == nil {
		return t, true
	}
	return time.Time{}, false
}

// untilMicros returns t - now in microseconds, saturating.
func untilMicros(t time.Time, now int64) int64 {
	// Unix seconds of any parsable date fit easily; work in seconds first
	// so that far dates do not overflow UnixMicro.
	s := t.Unix()
	if s > 1<<40 || s < -(1<<40) {
		if s > 0 {
			return 1 << 62
		}
		return -(1 << 62)
	}
	return t.UnixMicro() - now
}

// Epoch thresholds of ResetDelay: a reset value at or above epochSeconds
// is a Unix time in seconds (2001-09-09 onwards; as a delay it would be 31
// years), at or above epochMillis a Unix time in milliseconds.
const (
	epochSeconds = int64(1_000_000_000)
	epochMillis  = int64(1_000_000_000_000)
)

// ResetDelay parses an X-RateLimit-Reset style value at now and returns the
// delay until the reset, in microseconds clamped to [0, maxDelay]. Servers
// send three kinds of number under the same name, told apart by size:
//
//   - below 10^9: delta-seconds until the reset (GitLab's RateLimit-Reset,
//     the IETF drafts), possibly with a fraction ("1.5");
//   - from 10^9 to below 10^12: a Unix time in seconds (GitHub, Twitter);
//     10^9 seconds is 2001-09-09, and as a delay it would be 31 years;
//   - from 10^12: a Unix time in milliseconds.
//
// An HTTP-date is accepted too, and an RFC 3339 time (Atlassian's
// "2026-12-02T10:15:00Z"). A time in the past is a delay of 0.
func ResetDelay(v string, now, maxDelay int64) (int64, bool) {
	v = trimOWS(v)
	whole, frac, hasFrac := strings.Cut(v, ".")
	n, ok := digits(whole)
	if !ok {
		if t, ok := httpDate(v, now); ok {
			return clampDelay(untilMicros(t, now), maxDelay), true
		}
		return rfc3339Delay(v, now, maxDelay)
	}
	var fracMicros int64
	if hasFrac {
		if frac == "" || len(frac) > 9 {
			return 0, false
		}
		f, ok := digits(frac)
		if !ok {
			return 0, false
		}
		// Scale the fraction to microseconds (truncating).
		for i := len(frac); i < 6; i++ {
			f *= 10
		}
		for i := len(frac); i > 6; i-- {
			f /= 10
		}
		fracMicros = f
	}
	switch {
	case n >= epochMillis:
		if n > 1<<50 {
			return maxDelay, true
		}
		return clampDelay(n*1000-now, maxDelay), true
	case n >= epochSeconds:
		return clampDelay(n*sec+fracMicros-now, maxDelay), true
	}
	return clampDelay(n*sec+fracMicros, maxDelay), true
}

// deltaSeconds parses a count of seconds with an optional fraction
// ("17", "0.640") into microseconds clamped to [0, maxDelay].
func deltaSeconds(v string, maxDelay int64) (int64, bool) {
	v = trimOWS(v)
	if n, ok := digits(v); ok {
		return clampDelay(secondsToMicros(n), maxDelay), true
	}
	if d, ok := decimalSeconds(v); ok {
		return clampDelay(d, maxDelay), true
	}
	return 0, false
}

// deltaMillis parses a count of milliseconds with an optional fraction
// ("1500", "37.5"; Azure's and OpenAI's retry-after-ms) into
// microseconds clamped to [0, maxDelay].
func deltaMillis(v string, maxDelay int64) (int64, bool) {
	d, ok := deltaSeconds(v, 1<<62)
	if !ok {
		return 0, false
	}
	return clampDelay(d/1000, maxDelay), true
}

// headerInt parses the leading integer of a quota header value. Some
// servers append a policy ("100, 100;w=60"); only the first number counts.
// A decimal counts by its whole part (Reddit's "X-Ratelimit-Remaining:
// 597.0"; 0.6 left is none).
func headerInt(v string) (int64, bool) {
	v = trimOWS(v)
	if i := strings.IndexAny(v, ",;"); i >= 0 {
		v = trimOWS(v[:i])
	}
	if whole, frac, ok := strings.Cut(v, "."); ok {
		if _, ok := digits(frac); !ok {
			return 0, false
		}
		v = whole
	}
	return digits(v)
}

// resetKind says how a quota's reset field counts.
type resetKind uint8

const (
	// resetEpoch: delta-seconds or a Unix time, told apart by size
	// (ResetDelay): X-RateLimit-Reset.
	resetEpoch resetKind = iota
	// resetDelta: always delta-seconds (the IETF drafts' RateLimit-Reset).
	resetDelta
	// resetDuration: a duration with units, "1s", "6m0s", "20ms" (OpenAI's
	// x-ratelimit-reset-requests); plain seconds are read too.
	resetDuration
	// resetTime: an RFC 3339 time (Anthropic's
	// anthropic-ratelimit-requests-reset).
	resetTime
)

// quotaKeys names the fields of one quota stated in separate headers.
// resetAfter, when not empty, names a field with the seconds until the
// reset, fraction and all (Discord's X-RateLimit-Reset-After: "0.640"),
// which wins over reset: it needs no clock in step with the provider's.
type quotaKeys struct {
	name, limit, remaining, reset, resetAfter string
	kind                                      resetKind
	// window, when not 0, is the quota's window (µs), which the
	// provider documents rather than sends; windowMillis, when not
	// empty, names a field that sends it in milliseconds.
	window       int64
	windowMillis string
}

// The quotas stated in separate headers, in the order they are read.
var (
	ietfLegacyKeys = quotaKeys{limit: "Ratelimit-Limit", remaining: "Ratelimit-Remaining", reset: "Ratelimit-Reset", kind: resetDelta}
	xRateLimitKeys = quotaKeys{limit: "X-Ratelimit-Limit", remaining: "X-Ratelimit-Remaining", reset: "X-Ratelimit-Reset",
		resetAfter: "X-Ratelimit-Reset-After"}
	xRateLimitAltKeys = quotaKeys{limit: "X-Rate-Limit-Limit", remaining: "X-Rate-Limit-Remaining", reset: "X-Rate-Limit-Reset"}
	// HubSpot: calls per interval, the interval in milliseconds in a
	// field of its own (X-HubSpot-RateLimit-Interval-Milliseconds).
	hubSpotKeys = quotaKeys{name: "interval", limit: "X-Hubspot-Ratelimit-Max", remaining: "X-Hubspot-Ratelimit-Remaining",
		windowMillis: "X-Hubspot-Ratelimit-Interval-Milliseconds"}
	// OpenAI: requests and tokens a minute (its documented RPM and TPM,
	// replenished continuously), each with the time until it is whole
	// again.
	openAIKeys = [...]quotaKeys{
		{name: "requests", limit: "X-Ratelimit-Limit-Requests", remaining: "X-Ratelimit-Remaining-Requests", reset: "X-Ratelimit-Reset-Requests", kind: resetDuration, window: 60 * sec},
		{name: "tokens", limit: "X-Ratelimit-Limit-Tokens", remaining: "X-Ratelimit-Remaining-Tokens", reset: "X-Ratelimit-Reset-Tokens", kind: resetDuration, window: 60 * sec},
	}
	// Anthropic: requests, tokens, input and output tokens a minute
	// (replenished continuously), each with the time it is whole again.
	anthropicKeys = [...]quotaKeys{
		{name: "requests", limit: "Anthropic-Ratelimit-Requests-Limit", remaining: "Anthropic-Ratelimit-Requests-Remaining", reset: "Anthropic-Ratelimit-Requests-Reset", kind: resetTime, window: 60 * sec},
		{name: "tokens", limit: "Anthropic-Ratelimit-Tokens-Limit", remaining: "Anthropic-Ratelimit-Tokens-Remaining", reset: "Anthropic-Ratelimit-Tokens-Reset", kind: resetTime, window: 60 * sec},
		{name: "input-tokens", limit: "Anthropic-Ratelimit-Input-Tokens-Limit", remaining: "Anthropic-Ratelimit-Input-Tokens-Remaining", reset: "Anthropic-Ratelimit-Input-Tokens-Reset", kind: resetTime, window: 60 * sec},
		{name: "output-tokens", limit: "Anthropic-Ratelimit-Output-Tokens-Limit", remaining: "Anthropic-Ratelimit-Output-Tokens-Remaining", reset: "Anthropic-Ratelimit-Output-Tokens-Reset", kind: resetTime, window: 60 * sec},
	}
)

// rfc3339Delay parses an RFC 3339 time (fractional seconds allowed) at
// now into microseconds until it, clamped to [0, maxDelay].
func rfc3339Delay(v string, now, maxDelay int64) (int64, bool) {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return 0, false
	}
	return clampDelay(untilMicros(t, now), maxDelay), true
}

// resetValue parses a reset field of kind at now into microseconds until
// the reset, clamped to [0, maxDelay].
func resetValue(v string, kind resetKind, now, maxDelay int64) (int64, bool) {
	switch kind {
	case resetEpoch:
		return ResetDelay(v, now, maxDelay)
	case resetDuration:
		v = trimOWS(v)
		if d, ok := deltaSeconds(v, maxDelay); ok {
			return d, true
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, false
		}
		return clampDelay(d.Microseconds(), maxDelay), true
	case resetTime:
		return rfc3339Delay(trimOWS(v), now, maxDelay)
	}
	n, ok := headerInt(v)
	if !ok {
		return 0, false
	}
	return clampDelay(secondsToMicros(n), maxDelay), true
}

// legacy reads one quota stated in separate headers (k) as a policy of
// source src.
func (p *Parser) legacy(rep *Report, h http.Header, now int64, k *quotaKeys, src Source) {
	var pol Policy
	pol.Source, pol.Name = src, k.name
	if v := h[k.limit]; len(v) > 0 {
		if n, ok := headerInt(v[0]); ok {
			pol.Limit, pol.Known = n, pol.Known|FieldLimit
		}
	}
	if v := h[k.remaining]; len(v) > 0 {
		if n, ok := headerInt(v[0]); ok {
			pol.Remaining, pol.Known = n, pol.Known|FieldRemaining
		}
	}
	if v := h[k.reset]; len(v) > 0 {
		if d, ok := resetValue(v[0], k.kind, now, p.maxDelay); ok {
			pol.ResetAfter, pol.Known = d, pol.Known|FieldResetAfter
		}
	}
	if v := h[k.resetAfter]; k.resetAfter != "" && len(v) > 0 {
		if d, ok := deltaSeconds(v[0], p.maxDelay); ok {
			pol.ResetAfter, pol.Known = d, pol.Known|FieldResetAfter
		}
	}
	if pol.Known == 0 {
		return
	}
	if v := h[k.windowMillis]; k.windowMillis != "" && len(v) > 0 {
		if d, ok := deltaMillis(v[0], p.maxDelay); ok && d > 0 {
			pol.Window, pol.Known = d, pol.Known|FieldWindow
		}
	}
	if k.window > 0 {
		pol.Window, pol.Known = k.window, pol.Known|FieldWindow
	}
	rep.Sources |= src
	rep.addPolicy(pol)
}

// Stack buffers for structured field parsing: enough for every real
// RateLimit field without touching the heap.
const (
	sfMembers = 8
	sfParams  = 32
)

// ietf reads RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-
// headers): each a List of policies named by a String (or, in earlier
// drafts, a Token), with q (quota) and w (window seconds) on the policy and
// r (remaining) and t (seconds until reset) on the RateLimit member. A
// RateLimit member is matched to the policy of the same name; an
// unnamed (Integer) member of an older draft ("100;w=60") is a quota.
// The older drafts' Dictionary (limit=, remaining=, reset=) is read when
// the List form does not parse.
func (p *Parser) ietf(rep *Report, h http.Header) {
	pv, rv := h["Ratelimit-Policy"], h["Ratelimit"]
	if len(pv) == 0 && len(rv) == 0 {
		return
	}
	var (
		pmBuf [sfMembers]sfMember
		ppBuf [sfParams]sfParam
		rmBuf [sfMembers]sfMember
		rpBuf [sfParams]sfParam
	)
	pm, pp, okP := parseSFLines(pv, pmBuf[:0], ppBuf[:0], false)
	if !okP {
		pm = pm[:0]
	}
	rm, rp, okR := parseSFLines(rv, rmBuf[:0], rpBuf[:0], false)
	dict := false
	if !okR {
		rm, rp, okR = parseSFLines(rv, rmBuf[:0], rpBuf[:0], true)
		dict = okR
		if !okR {
			rm = rm[:0]
		}
	}
	var pols [sfMembers]Policy
	n := 0
	// Policies first.
	for _, m := range pm {
		if n == len(pols) {
			break
		}
		pol := Policy{Source: SourceIETF}
		switch m.Value.Kind {
		case sfString, sfToken:
			pol.Name = m.Value.Str
		case sfInteger:
			if m.Value.Int >= 0 {
				pol.Limit, pol.Known = m.Value.Int, FieldLimit
			}
		default:
			continue
		}
		for _, prm := range pp[m.Lo:m.Hi] {
			switch prm.Key {
			case "q":
				if prm.Value.Kind == sfInteger && prm.Value.Int >= 0 {
					pol.Limit, pol.Known = prm.Value.Int, pol.Known|FieldLimit
				}
			case "w":
				if prm.Value.Kind == sfInteger && prm.Value.Int > 0 {
					pol.Window, pol.Known = clampDelay(secondsToMicros(prm.Value.Int), 1<<62), pol.Known|FieldWindow
				}
			}
		}
		pols[n] = pol
		n++
	}
	// Then the current state of each, matched by name.
	if dict {
		var pol Policy
		pol.Source = SourceIETF
		for _, m := range rm {
			if m.Value.Kind != sfInteger || m.Value.Int < 0 {
				continue
			}
			switch m.Key {
			case "limit":
				pol.Limit, pol.Known = m.Value.Int, pol.Known|FieldLimit
			case "remaining":
				pol.Remaining, pol.Known = m.Value.Int, pol.Known|FieldRemaining
			case "reset":
				pol.ResetAfter, pol.Known = clampDelay(secondsToMicros(m.Value.Int), p.maxDelay), pol.Known|FieldResetAfter
			}
		}
		if pol.Known != 0 && n < len(pols) {
			if n == 1 && pols[0].Name == "" {
				// A single unnamed policy describes this same limit.
				pol.Window, pol.Known = pols[0].Window, pol.Known|pols[0].Known&FieldWindow
				if pol.Known&FieldLimit == 0 {
					pol.Limit, pol.Known = pols[0].Limit, pol.Known|pols[0].Known&FieldLimit
				}
				n = 0
			}
			pols[n] = pol
			n++
		}
	} else {
		for _, m := range rm {
			var name string
			switch m.Value.Kind {
			case sfString, sfToken:
				name = m.Value.Str
			default:
				continue
			}
			j := 0
			for j < n && pols[j].Name != name {
				j++
			}
			if j == n {
				if n == len(pols) {
					continue
				}
				pols[n] = Policy{Source: SourceIETF, Name: name}
				n++
			}
			pol := &pols[j]
			for _, prm := range rp[m.Lo:m.Hi] {
				if prm.Value.Kind != sfInteger || prm.Value.Int < 0 {
					continue
				}
				switch prm.Key {
				case "r":
					pol.Remaining, pol.Known = prm.Value.Int, pol.Known|FieldRemaining
				case "t":
					pol.ResetAfter, pol.Known = clampDelay(secondsToMicros(prm.Value.Int), p.maxDelay), pol.Known|FieldResetAfter
				}
			}
		}
	}
	for _, pol := range pols[:n] {
		if pol.Known == 0 {
			continue
		}
		rep.Sources |= SourceIETF
		rep.addPolicy(pol)
	}
}

// parseSFLines parses the lines of one field as a single List (or
// Dictionary), as if they had been joined with commas.
func parseSFLines(lines []string, members []sfMember, params []sfParam, dict bool) ([]sfMember, []sfParam, bool) {
	if len(lines) == 0 {
		return members, params, true
	}
	for _, l := range lines {
		var ok bool
		if dict {
			members, params, ok = parseSFDictionary(l, members, params)
		} else {
			members, params, ok = parseSFList(l, members, params)
		}
		if !ok {
			return members, params, false
		}
	}
	return members, params, true
}
