package signal

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
)

// ShopifyCallLimit parses Shopify's REST X-Shopify-Shop-Api-Call-Limit
// header ("32/40": 32 calls used of a bucket of 40). It rejects a limit of
// zero and a used count above the limit.
func ShopifyCallLimit(v string) (used, limit int64, ok bool) {
	u, l, found := strings.Cut(trimOWS(v), "/")
	if !found {
		return 0, 0, false
	}
	used, ok1 := digits(trimOWS(u))
	limit, ok2 := digits(trimOWS(l))
	if !ok1 || !ok2 || limit == 0 || used > limit {
		return 0, 0, false
	}
	return used, limit, true
}

// GraphQLCost is what a Shopify GraphQL response reports about its cost. It
// is a plain value; the zero value reports nothing.
type GraphQLCost struct {
	// Requested and Actual are requestedQueryCost and actualQueryCost;
	// Actual is 0 (null) when the query was throttled and not run.
	Requested, Actual float64
	// Maximum, Available and RestoreRate are throttleStatus's
	// maximumAvailable, currentlyAvailable and restoreRate (points per
	// second); HasStatus says throttleStatus was present.
	Maximum, Available, RestoreRate float64
	HasStatus                       bool
	// Throttled is set when errors[] holds extensions.code THROTTLED, or
	// an error without a code whose message is "Throttled".
	Throttled bool
	// TooCostly is set when errors[] holds MAX_COST_EXCEEDED: the query
	// costs more than the bucket can ever hold and must be made smaller.
	TooCostly bool
}

type graphQLBody struct {
	Errors []struct {
		Message    string `json:"message"`
		Extensions struct {
			Code string `json:"code"`
		} `json:"extensions"`
	} `json:"errors"`
	Extensions struct {
		Cost *struct {
			RequestedQueryCost *float64 `json:"requestedQueryCost"`
			ActualQueryCost    *float64 `json:"actualQueryCost"`
			ThrottleStatus     *struct {
				MaximumAvailable   *float64 `json:"maximumAvailable"`
				CurrentlyAvailable *float64 `json:"currentlyAvailable"`
				RestoreRate        *float64 `json:"restoreRate"`
			} `json:"throttleStatus"`
		} `json:"cost"`
	} `json:"extensions"`
}

// ShopifyGraphQL reads the cost report of a Shopify GraphQL JSON body:
// extensions.cost and any THROTTLED or MAX_COST_EXCEEDED error (an error
// without a code whose message is "Throttled" is THROTTLED too). ok is false
// when the body is not a JSON object or holds neither; negative, NaN or
// infinite numbers are treated as absent.
func ShopifyGraphQL(body []byte) (c GraphQLCost, ok bool) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return c, false
	}
	var b graphQLBody
	if err := json.Unmarshal(body, &b); err != nil {
		return c, false
	}
	for _, e := range b.Errors {
		switch e.Extensions.Code {
		case "THROTTLED":
			c.Throttled, ok = true, true
		case "MAX_COST_EXCEEDED":
			c.TooCostly, ok = true, true
		case "":
			// Shopify's documented throttle error, as older API
			// versions send it: {"errors":[{"message":"Throttled"}]}.
			if e.Message == "Throttled" {
				c.Throttled, ok = true, true
			}
		}
	}
	cost := b.Extensions.Cost
	if cost == nil {
		return c, ok
	}
	if v, good := finite(cost.RequestedQueryCost); good {
		c.Requested, ok = v, true
	}
	if v, good := finite(cost.ActualQueryCost); good {
		c.Actual, ok = v, true
	}
	if ts := cost.ThrottleStatus; ts != nil {
		m, okM := finite(ts.MaximumAvailable)
		a, okA := finite(ts.CurrentlyAvailable)
		r, okR := finite(ts.RestoreRate)
		if okM && okA && okR && m > 0 {
			c.Maximum, c.Available, c.RestoreRate = m, min(a, m), r
			c.HasStatus, ok = true, true
		}
	}
	return c, ok
}

func finite(p *float64) (float64, bool) {
	if p == nil || math.IsNaN(*p) || math.IsInf(*p, 0) || *p < 0 {
		return 0, false
	}
	return *p, true
}

// graphQL folds a GraphQL cost report into rep. A THROTTLED query makes the
// response throttled and transient even though its status is 200; the
// delay until the bucket holds the requested cost becomes RetryAfter
// unless a Retry-After header already set one.
func (p *Parser) graphQL(rep *Report, body []byte) {
	c, ok := ShopifyGraphQL(body)
	if !ok {
		return
	}
	rep.Sources |= SourceShopifyGraphQL
	if c.Requested > 0 || c.Actual > 0 {
		rep.CostRequested, rep.CostActual, rep.HasCost = c.Requested, c.Actual, true
	}
	if c.TooCostly && rep.Class == ClassSuccess {
		rep.Class = ClassPermanent
	}
	if c.Throttled {
		rep.Throttled = true
		if rep.Class == ClassSuccess {
			rep.Class = ClassTransient
		}
	}
	if !c.HasStatus {
		return
	}
	rep.RestoreRate = c.RestoreRate
	pol := Policy{Source: SourceShopifyGraphQL, Known: FieldLimit | FieldRemaining | FieldUsed,
		Limit: units(c.Maximum), Remaining: units(c.Available), Used: units(math.Ceil(c.Maximum - c.Available))}
	if c.RestoreRate > 0 {
		// Until the bucket is full again.
		pol.ResetAfter = secondsDelay((c.Maximum-c.Available)/c.RestoreRate, p.maxDelay)
		pol.Known |= FieldResetAfter
		if c.Throttled && !rep.HasRetryAfter && c.Requested > c.Available {
			rep.RetryAfter = secondsDelay((c.Requested-c.Available)/c.RestoreRate, p.maxDelay)
			rep.HasRetryAfter = true
		}
	}
	rep.addPolicy(pol)
}

// maxUnits bounds counts converted from JSON floats: exact in a float64.
const maxUnits = int64(1) << 53

// units converts a non-negative count to int64, rounding down and
// saturating at maxUnits.
func units(f float64) int64 {
	if !(f > 0) {
		return 0
	}
	if f >= float64(maxUnits) {
		return maxUnits
	}
	return int64(f)
}

// secondsDelay converts seconds to microseconds rounded up, clamped to
// [0, maxDelay].
func secondsDelay(s float64, maxDelay int64) int64 {
	us := math.Ceil(s * float64(sec))
	if !(us > 0) {
		return 0
	}
	if us >= float64(maxDelay) {
		return maxDelay
	}
	return int64(us)
}
