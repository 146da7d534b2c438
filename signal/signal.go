package signal

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// ErrInvalidConfig is wrapped by New for a Config it cannot use.
var ErrInvalidConfig = errors.New("signal: invalid config")

// DefaultMaxDelay is the clamp on Retry-After and reset delays when
// Config.MaxDelay is zero: a day, longer than any ban Binance documents
// for a first offence and short enough that a corrupt header cannot park a
// key for years.
const DefaultMaxDelay = 24 * time.Hour

// MaxPolicies is how many policies a Report keeps. Further policies in a
// response are ignored, except that the headline quota still considers
// them.
const MaxPolicies = 8

// Class is the coarse kind of an outcome, what retry and the breaker key
// on. The zero value is no class (an empty Report).
type Class uint8

const (
	// ClassSuccess is a 1xx, 2xx or 3xx response without a throttling
	// error in its body.
	ClassSuccess Class = iota + 1
	// ClassTransient may succeed if tried again later: timeouts, network
	// errors, 408, 429, 418 (a ban, once it is over), 500, 502, 503, 504,
	// and THROTTLED inside a 200.
	ClassTransient
	// ClassPermanent will fail again: every other 4xx, the other 5xx
	// (501, 505, ...), an error that is neither a timeout nor a network
	// error, and a GraphQL query rejected for costing more than the
	// bucket can ever hold.
	ClassPermanent
	// ClassCanceled is a call the caller canceled: not the provider's
	// doing, so it is neither retried nor counted against the provider.
	ClassCanceled
)

// String returns the class name.
func (c Class) String() string {
	switch c {
	case ClassSuccess:
		return "success"
	case ClassTransient:
		return "transient"
	case ClassPermanent:
		return "permanent"
	case ClassCanceled:
		return "canceled"
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// Source is a set of dialects a Report was read from; the zero value is
// none.
type Source uint16

// The dialects.
const (
	SourceRetryAfter     Source = 1 << iota // Retry-After
	SourceIETF                              // RateLimit / RateLimit-Policy (structured fields)
	SourceIETFLegacy                        // RateLimit-Limit / -Remaining / -Reset
	SourceXRateLimit                        // X-RateLimit-* / X-Rate-Limit-*
	SourceShopifyREST                       // X-Shopify-Shop-Api-Call-Limit
	SourceShopifyGraphQL                    // extensions.cost in a GraphQL body
	SourceBinance                           // X-MBX-USED-WEIGHT-* / X-MBX-ORDER-COUNT-*
)

// Field is a set of quota fields that a Policy or Report holds; the zero
// value is none.
type Field uint8

// The fields.
const (
	FieldLimit      Field = 1 << iota // Limit (a policy's quota)
	FieldRemaining                    // Remaining
	FieldUsed                         // Used
	FieldResetAfter                   // ResetAfter
	FieldWindow                       // Window
)

// Policy is one limit a provider reported. Only the fields in Known were
// reported; the others are zero. It is a plain value; the zero value is a
// policy that reported nothing.
type Policy struct {
	// Name is the policy's name where the dialect has one (an IETF policy
	// name, "weight" or "orders" for Binance); it may share memory with
	// the header it came from.
	Name   string
	Source Source
	Known  Field
	// Limit is the quota: units per Window.
	Limit int64
	// Remaining is the units left now.
	Remaining int64
	// Used is the units used in the current window (Binance, Shopify).
	Used int64
	// ResetAfter, in microseconds, is when more quota becomes available.
	ResetAfter int64
	// Window, in microseconds, is the policy's window.
	Window int64
}

// Report is everything one response said about the provider's limits and
// how the call went. It is a plain value (copy it freely; do not mutate one
// shared between goroutines); the zero value is an empty report with no
// class.
type Report struct {
	// Status is the HTTP status, 0 when the call failed without one.
	Status int
	Class  Class
	// Throttled is set when the provider refused the call for rate
	// reasons: 429, 503, 529 (overloaded), 418, THROTTLED in a GraphQL
	// body, or a 403 with a Retry-After or with the quota it states
	// exhausted (GitHub).
	Throttled bool
	// Banned is set for a 418: the caller is banned until RetryAfter.
	Banned bool
	// Timeout is set when the call failed by timing out.
	Timeout bool
	// Unknown is set when the call may have been processed although it
	// did not succeed: a 500, 502 or 504, a 503 without Retry-After, a
	// timeout, or a network error after the request was sent. A
	// non-idempotent call must not be retried blindly after it.
	Unknown bool
	// RetryAfter, in microseconds, is the delay a Retry-After asked for
	// (or a throttled GraphQL bucket needs to refill), when HasRetryAfter.
	RetryAfter    int64
	HasRetryAfter bool
	// RetryAfterDate says the Retry-After was an HTTP-date: an instant
	// to the whole second, so RetryAfter is what is left of that second
	// and may be far less than the provider's wait was (or 0), not the
	// exact wait a delay with a fraction states.
	RetryAfterDate bool
	// Known says which of Limit, Remaining, Used, ResetAfter and Window
	// hold the headline quota: the most constraining policy reported.
	Known      Field
	Limit      int64
	Remaining  int64
	Used       int64
	ResetAfter int64
	Window     int64
	// RestoreRate, in units per second, is a leaky bucket's refill rate
	// (Shopify GraphQL's throttleStatus.restoreRate); 0 when not reported.
	RestoreRate float64
	// CostRequested and CostActual are a GraphQL query's requested and
	// actual cost; HasCost says they were reported (CostActual is 0 for a
	// throttled query, which was not run).
	CostRequested float64
	CostActual    float64
	HasCost       bool
	// Sources is the set of dialects found.
	Sources Source
	// Policies holds the first NPolicies policies found.
	Policies  [MaxPolicies]Policy
	NPolicies int
}

// Response is the input to Parse: a response, or the error that stood for
// one. Parse only reads it. The zero value is a response with status 0 and
// nothing else, classified permanent.
type Response struct {
	Status int
	Header http.Header // keys in canonical form, as net/http produces them
	// Body is optional: a JSON GraphQL body to read extensions.cost and
	// THROTTLED errors from. Other bodies are ignored.
	Body []byte
	// Err is the transport error when there is no response.
	Err error
}

// Config configures a Parser. The zero value is the default; New copies it.
type Config struct {
	// MaxDelay clamps Retry-After, reset and refill delays. Zero means
	// DefaultMaxDelay.
	MaxDelay time.Duration
}

// Parser parses responses with a Config. It is safe for concurrent use; its
// zero value is not usable, use New.
type Parser struct {
	maxDelay int64
}

// New validates cfg and returns a Parser.
func New(cfg Config) (*Parser, error) {
	if cfg.MaxDelay < 0 {
		return nil, fmt.Errorf("%w: MaxDelay must be >= 0, got %v", ErrInvalidConfig, cfg.MaxDelay)
	}
	if cfg.MaxDelay == 0 {
		cfg.MaxDelay = DefaultMaxDelay
	}
	if cfg.MaxDelay < time.Microsecond {
		return nil, fmt.Errorf("%w: MaxDelay must be at least 1us, got %v", ErrInvalidConfig, cfg.MaxDelay)
	}
	return &Parser{maxDelay: cfg.MaxDelay.Microseconds()}, nil
}

var defaultParser = Parser{maxDelay: DefaultMaxDelay.Microseconds()}

// Parse parses r with the default Config; see Parser.Parse.
func Parse(now int64, r Response) Report {
	var rep Report
	defaultParser.ParseTo(&rep, now, r)
	return rep
}

// Parse classifies r and reads every dialect from its header (and body) at
// now, Unix microseconds.
func (p *Parser) Parse(now int64, r Response) Report {
	var rep Report
	p.ParseTo(&rep, now, r)
	return rep
}

// ParseTo is Parse into a caller's Report, which it overwrites; it does not
// allocate for header-only responses.
func (p *Parser) ParseTo(rep *Report, now int64, r Response) {
	*rep = Report{Status: r.Status}
	if r.Err != nil {
		rep.Status = 0
		rep.Class, rep.Timeout, rep.Unknown = classifyErr(r.Err)
		return
	}
	rep.Class = ClassifyStatus(r.Status)
	switch r.Status {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable, statusOverloaded:
		rep.Throttled = true
	case http.StatusTeapot:
		rep.Throttled, rep.Banned = true, true
	}
	h := r.Header
	if v := h["Retry-After"]; len(v) > 0 {
		if d, date, ok := retryAfter(v[0], now, p.maxDelay); ok {
			rep.RetryAfter, rep.HasRetryAfter, rep.RetryAfterDate = d, true, date
			rep.Sources |= SourceRetryAfter
		}
	}
	// The same wait in milliseconds (Azure's and OpenAI's retry-after-ms,
	// Azure's x-ms-retry-after-ms) is the more exact, and wins.
	for _, k := range [...]string{"Retry-After-Ms", "X-Ms-Retry-After-Ms"} {
		if v := h[k]; len(v) > 0 {
			if d, ok := deltaMillis(v[0], p.maxDelay); ok {
				rep.RetryAfter, rep.HasRetryAfter, rep.RetryAfterDate = d, true, false
				rep.Sources |= SourceRetryAfter
				break
			}
		}
	}
	p.ietf(rep, h)
	p.legacy(rep, h, now, &ietfLegacyKeys, SourceIETFLegacy)
	p.legacy(rep, h, now, &xRateLimitKeys, SourceXRateLimit)
	p.legacy(rep, h, now, &xRateLimitAltKeys, SourceXRateLimit)
	p.legacy(rep, h, now, &hubSpotKeys, SourceXRateLimit)
	for i := range openAIKeys {
		p.legacy(rep, h, now, &openAIKeys[i], SourceXRateLimit)
	}
	for i := range anthropicKeys {
		p.legacy(rep, h, now, &anthropicKeys[i], SourceXRateLimit)
	}
	if v := h["X-Shopify-Shop-Api-Call-Limit"]; len(v) > 0 {
		if used, limit, ok := ShopifyCallLimit(v[0]); ok {
			rep.Sources |= SourceShopifyREST
			rep.addPolicy(Policy{Source: SourceShopifyREST, Known: FieldLimit | FieldRemaining | FieldUsed,
				Limit: limit, Remaining: max(limit-used, 0), Used: used})
		}
	}
	binance(rep, h)
	if len(r.Body) > 0 {
		p.graphQL(rep, r.Body)
		if r.Status == http.StatusTooManyRequests {
			p.bodyRetryAfter(rep, r.Body)
		}
	}
	if r.Status == http.StatusForbidden && (rep.HasRetryAfter || rep.Known&FieldRemaining != 0 && rep.Remaining == 0) {
		// A 403 over a rate limit (GitHub's REST and GraphQL APIs, and
		// others that follow them): with a Retry-After (a secondary
		// limit) or with the quota it states exhausted (a primary one,
		// until its reset). The call is refused, not forbidden, and
		// waits rather than fail; a 403 saying neither is permission.
		rep.Class, rep.Throttled = ClassTransient, true
	}
	// A 503 that says when to come back refused the request; one that
	// does not may come from anywhere in the chain, after the request was
	// handled (Binance: "the execution status is UNKNOWN").
	switch r.Status {
	case 500, 502, 504:
		rep.Unknown = true
	case 503:
		rep.Unknown = !rep.HasRetryAfter
	}
}

// addPolicy keeps pol (while there is room) and makes it the headline
// quota when it is more constraining than the current one: fewer units
// remaining, or as few for longer. A policy with neither Limit nor
// Remaining is never the headline.
func (rep *Report) addPolicy(pol Policy) {
	if rep.NPolicies < MaxPolicies {
		rep.Policies[rep.NPolicies] = pol
		rep.NPolicies++
	}
	if pol.Known&(FieldLimit|FieldRemaining) == 0 {
		return // usage alone (Binance) says nothing about what is left
	}
	if rep.Known != 0 && !tighter(pol, rep.headline()) {
		return
	}
	rep.Known, rep.Limit, rep.Remaining, rep.Used = pol.Known, pol.Limit, pol.Remaining, pol.Used
	rep.ResetAfter, rep.Window = pol.ResetAfter, pol.Window
}

func (rep *Report) headline() Policy {
	return Policy{Known: rep.Known, Limit: rep.Limit, Remaining: rep.Remaining, Used: rep.Used,
		ResetAfter: rep.ResetAfter, Window: rep.Window}
}

// tighter reports whether a constrains the caller more than b. A policy
// with a known Remaining beats one without; fewer remaining wins; at equal
// remaining the longer reset wins.
func tighter(a, b Policy) bool {
	ar, br := a.Known&FieldRemaining != 0, b.Known&FieldRemaining != 0
	if ar != br {
		return ar
	}
	if !ar {
		return false
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return a.ResetAfter > b.ResetAfter
}

// Pause returns how long, in microseconds, the key should send nothing
// after this response: the Retry-After delay when there was one, else the
// headline reset when the headline quota is exhausted (Remaining 0), else
// 0.
func (rep *Report) Pause() int64 {
	if rep.HasRetryAfter {
		return rep.RetryAfter
	}
	if rep.Known&FieldRemaining != 0 && rep.Remaining == 0 && rep.Known&FieldResetAfter != 0 {
		return rep.ResetAfter
	}
	return 0
}
