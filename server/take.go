package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store"
)

// MaxCost is the largest cost a request may carry: 2^53, the largest
// integer every JSON implementation reads exactly.
const MaxCost = 1 << 53

// takeBody is the body of POST /v1/take: either one policy, key and cost,
// or items taken all-or-nothing. Items are decoded one by one, into items,
// so that errors can point at the item.
type takeBody struct {
	Policy string            `json:"policy"`
	Key    string            `json:"key"`
	Cost   json.RawMessage   `json:"cost"`
	Items  []json.RawMessage `json:"items"`

	items []takeItem
}

type takeItem struct {
	Policy string          `json:"policy"`
	Key    string          `json:"key"`
	Cost   json.RawMessage `json:"cost"`
}

// decisionJSON is one policy's decision in a response.
type decisionJSON struct {
	Allowed      bool   `json:"allowed"`
	Policy       string `json:"policy"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	RetryAfterMs int64  `json:"retryAfterMs"`
	ResetAfterMs int64  `json:"resetAfterMs"`
	Shadowed     bool   `json:"shadowed"`
	// Outage and OutageReason are set when the shared store did not
	// decide: the policy's outage mode ("fail_open", "fail_closed",
	// "local") and why ("store_down"; "timeout": the store is up but did
	// not answer in time, so the request is denied in every mode).
	Outage       string `json:"outage,omitempty"`
	OutageReason string `json:"outageReason,omitempty"`
}

type multiJSON struct {
	Allowed      bool           `json:"allowed"`
	RetryAfterMs int64          `json:"retryAfterMs"`
	Items        []decisionJSON `json:"items"`
}

func toJSON(d limiter.Decision) decisionJSON {
	out := decisionJSON{
		Allowed:      d.Allowed,
		Policy:       d.Policy,
		Limit:        d.Limit,
		Remaining:    d.Remaining,
		RetryAfterMs: ceilMillis(d.RetryAfter),
		ResetAfterMs: ceilMillis(d.ResetAfter),
		Shadowed:     d.Shadowed,
	}
	if d.Fallback != store.NoFallback {
		out.Outage, out.OutageReason = d.FallbackMode.String(), d.Fallback.String()
	}
	return out
}

// OutageHeader is the response header that marks an answer the shared
// store did not decide: `Sluice-Outage: fail_open;reason=store_down` (a
// structured-field token, the policy's outage mode, with the reason:
// store_down or timeout). For an all-or-nothing take it names the first
// item so decided.
const OutageHeader = "Sluice-Outage"

// setOutageHeader sets OutageHeader from the first fallback decision.
func setOutageHeader(h http.Header, ds []limiter.Decision) {
	for _, d := range ds {
		if d.Fallback != store.NoFallback {
			h.Set(OutageHeader, d.FallbackMode.String()+";reason="+d.Fallback.String())
			return
		}
	}
}

// validated is one checked item of a take.
type validated struct {
	info *policyInfo
	req  limiter.Request
}

func (s *Server) take(w http.ResponseWriter, r *http.Request) {
	lv := s.liveOf(r)
	w.Header().Set("Cache-Control", "no-store")
	body, p := s.decode(r)
	if p != nil {
		writeProblem(w, p)
		return
	}
	multi := body.Items != nil
	items, errs := s.validate(lv, body)
	if len(errs) > 0 {
		for _, it := range items {
			if it.info == nil {
				s.metrics.decisions.WithLabelValues(policyUnknown, resultError).Inc()
			} else {
				s.metrics.decisions.WithLabelValues(it.req.Policy, resultError).Inc()
			}
		}
		writeProblem(w, invalid(errs))
		return
	}
	if !multi {
		s.takeOne(r.Context(), lv, w, items[0])
		return
	}
	s.takeAll(r.Context(), lv, w, items)
}

func (s *Server) takeOne(ctx context.Context, lv *live, w http.ResponseWriter, it validated) {
	start := time.Now()
	d, err := it.info.handle.AllowN(ctx, it.req.Key, it.req.Cost)
	s.metrics.duration.WithLabelValues(it.req.Policy).Observe(time.Since(start).Seconds())
	if err != nil {
		s.metrics.decisions.WithLabelValues(it.req.Policy, resultError).Inc()
		s.storeError(w, err, "#")
		return
	}
	s.count(it.req.Key, d, d.Allowed)
	s.setRateLimitHeaders(lv, w.Header(), []limiter.Decision{d})
	setOutageHeader(w.Header(), []limiter.Decision{d})
	status := http.StatusOK
	if !d.Allowed {
		status = http.StatusTooManyRequests
		w.Header().Set("Retry-After", retryAfterSeconds(d.RetryAfter))
	}
	writeJSON(w, status, contentJSON, toJSON(d))
}

func (s *Server) takeAll(ctx context.Context, lv *live, w http.ResponseWriter, items []validated) {
	reqs := make([]limiter.Request, len(items))
	for i, it := range items {
		reqs[i] = it.req
	}
	start := time.Now()
	md, err := lv.lim.AllowAll(ctx, reqs)
	elapsed := time.Since(start).Seconds()
	seen := make(map[string]bool, len(items))
	for _, it := range items {
		if !seen[it.req.Policy] {
			seen[it.req.Policy] = true
			s.metrics.duration.WithLabelValues(it.req.Policy).Observe(elapsed)
		}
	}
	if err != nil {
		for _, it := range items {
			s.metrics.decisions.WithLabelValues(it.req.Policy, resultError).Inc()
		}
		s.storeError(w, err, "#/items")
		return
	}
	out := multiJSON{Allowed: md.Allowed, RetryAfterMs: ceilMillis(md.RetryAfter), Items: make([]decisionJSON, len(md.Decisions))}
	for i, d := range md.Decisions {
		s.count(items[i].req.Key, d, md.Allowed)
		out.Items[i] = toJSON(d)
	}
	s.setRateLimitHeaders(lv, w.Header(), md.Decisions)
	setOutageHeader(w.Header(), md.Decisions)
	status := http.StatusOK
	if !md.Allowed {
		status = http.StatusTooManyRequests
		w.Header().Set("Retry-After", retryAfterSeconds(md.RetryAfter))
	}
	writeJSON(w, status, contentJSON, out)
}

// count records a decision. granted is whether the request as a whole was
// granted: an item of a refused all-or-nothing request counts as denied
// (nothing was charged) even if its own policy had room. The observer, if
// any, sees it too.
func (s *Server) count(key string, d limiter.Decision, granted bool) {
	if s.obs != nil {
		s.obs.ObserveDecision(key, d, granted)
	}
	res := resultAllowed
	switch {
	case d.Shadowed:
		res = resultShadowDenied
	case !granted || !d.Allowed:
		res = resultDenied
	}
	s.metrics.decisions.WithLabelValues(d.Policy, res).Inc()
}

// storeError answers a limiter error. The request was validated first, so
// errors here come from the store; the permanent ones the store may still
// report are 422, the rest 503.
func (s *Server) storeError(w http.ResponseWriter, err error, ptr string) {
	switch {
	case errors.Is(err, store.ErrCostExceedsLimit):
		writeProblem(w, &problem{Type: TypeCostExceedsLimit, Status: http.StatusUnprocessableEntity,
			Detail: "cost exceeds what the policy admits in one request"})
		return
	case errors.Is(err, store.ErrNegativeCost), errors.Is(err, store.ErrEmptyKey), errors.Is(err, store.ErrInvalidID),
		errors.Is(err, limiter.ErrUnknownPolicy), errors.Is(err, store.ErrInvalidValue), errors.Is(err, store.ErrOutOfRange):
		writeProblem(w, &problem{Type: TypeInvalidRequest, Status: http.StatusUnprocessableEntity,
			Detail: "the store refused the request: " + err.Error(),
			Errors: []fieldError{{Pointer: ptr, Detail: err.Error()}}})
		return
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads this answer.
		s.log.Debug("server: take cancelled by the client")
	default:
		s.log.Error("server: rate store failed", "err", err)
	}
	detail := "the rate store could not decide; try again"
	if errors.Is(err, store.ErrTooManyKeys) {
		detail = "the rate store is full of keys that still hold state; try again later"
	}
	w.Header().Set("Retry-After", "1")
	writeProblem(w, &problem{Type: TypeStoreUnavailable, Title: "Rate store unavailable",
		Status: http.StatusServiceUnavailable, Detail: detail})
}

// decode reads a take body (see readJSON), then each of its items.
func (s *Server) decode(r *http.Request) (*takeBody, *problem) {
	var body takeBody
	if p := s.readJSON(r, &body, "policy, key and cost, or items"); p != nil {
		return nil, p
	}
	if len(body.Items) > s.maxItems {
		// Before decoding each item: a body of a million "{}" is cheap to
		// send and should be cheap to refuse.
		var errs fieldErrs
		errs.add(TypeInvalidRequest, []string{"items"}, "holds %d items; at most %d are allowed", len(body.Items), s.maxItems)
		return nil, invalid(errs)
	}
	var errs []fieldError
	body.items = make([]takeItem, len(body.Items))
	for i, raw := range body.Items {
		if p := decodeJSON(raw, &body.items[i], []string{"items", strconv.Itoa(i)}, "policy, key and cost"); p != nil {
			errs = append(errs, p.Errors...)
		}
	}
	if len(errs) > 0 {
		return nil, &problem{Type: TypeMalformedRequest, Status: http.StatusBadRequest,
			Detail: joinDetails(errs), Errors: errs}
	}
	return &body, nil
}

// validate checks every field of a decoded body against the limits of the
// API and the server's policies. It returns one validated item per item of
// the request (info nil for an unknown policy) and every problem found.
func (s *Server) validate(lv *live, body *takeBody) ([]validated, []fieldError) {
	if body.Items == nil {
		it, errs := s.validateItem(lv, takeItem{Policy: body.Policy, Key: body.Key, Cost: body.Cost}, nil)
		return []validated{it}, errs
	}
	var errs fieldErrs
	if body.Policy != "" || body.Key != "" || (body.Cost != nil && string(body.Cost) != "null") {
		errs.add(TypeInvalidRequest, []string{"items"}, "comes with policy, key or cost: give either policy, key and cost, or items; not both")
	}
	if len(body.items) == 0 {
		errs.add(TypeInvalidRequest, []string{"items"}, "must not be empty")
		return nil, errs
	}
	out := make([]validated, len(body.items))
	for i, ti := range body.items {
		it, ierrs := s.validateItem(lv, ti, []string{"items", strconv.Itoa(i)})
		out[i] = it
		errs = append(errs, ierrs...)
	}
	return out, errs
}

func (s *Server) validateItem(lv *live, ti takeItem, at []string) (validated, []fieldError) {
	var errs fieldErrs
	add := func(name, kind, format string, args ...any) {
		errs.add(kind, append(append([]string(nil), at...), name), format, args...)
	}
	v := validated{req: limiter.Request{Policy: ti.Policy, Key: ti.Key, Cost: 1}}
	if ti.Policy == "" {
		add("policy", TypeInvalidRequest, "is required")
	} else if v.info = lv.policies[ti.Policy]; v.info == nil && lv.removed[ti.Policy] {
		add("policy", TypePolicyRemoved, "names policy %q, which a configuration reload removed", truncate(ti.Policy, 64))
	} else if v.info == nil {
		add("policy", TypeUnknownPolicy, "names an unknown policy %q; GET /v1/policies lists them", truncate(ti.Policy, 64))
	} else if v.info.handle.Policy().Algorithm == store.Concurrency {
		add("policy", TypeInvalidRequest, "names concurrency policy %q, which takes leases (POST /v1/leases), not costs", ti.Policy)
		return v, errs
	}
	if ti.Key == "" {
		add("key", TypeInvalidRequest, "is required")
	} else if why := idReason(ti.Key, store.MaxIDBytes); why != "" {
		add("key", TypeInvalidRequest, "%s", why)
	}
	cost, msg := parseCost(ti.Cost)
	switch {
	case msg != "":
		add("cost", TypeInvalidRequest, "%s", msg)
	case v.info != nil && cost > v.info.max:
		add("cost", TypeCostExceedsLimit, "is %d, above %d, the most policy %q admits in one request",
			cost, v.info.max, ti.Policy)
	default:
		v.req.Cost = cost
	}
	return v, errs
}

// parseCost reads a cost: absent or null means 1; otherwise an integer
// from 0 to MaxCost. It returns what is wrong with it (to follow the field
// name), or "".
func parseCost(raw json.RawMessage) (int64, string) {
	if raw == nil || string(raw) == "null" {
		return 1, ""
	}
	s := string(raw)
	if s[0] == '"' {
		return 0, fmt.Sprintf("must be a JSON number, not the string %s", truncate(s, 32))
	}
	digits, neg := strings.CutPrefix(s, "-")
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, fmt.Sprintf("must be a whole number, got %s", truncate(s, 32))
	}
	if neg && strings.Trim(digits, "0") != "" {
		return 0, fmt.Sprintf("must not be negative, got %s", truncate(s, 32))
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || n > MaxCost {
		return 0, fmt.Sprintf("is too large: %s; at most %d (2^53)", truncate(s, 32), uint64(MaxCost))
	}
	return int64(n), ""
}

// invalid builds the 422 problem for validation errors. Its type is the
// errors' own type when they share one, else invalid-request.
func invalid(errs []fieldError) *problem {
	kind := errs[0].kind
	for _, e := range errs[1:] {
		if e.kind != kind {
			kind = TypeInvalidRequest
			break
		}
	}
	title, status := "Invalid request", http.StatusUnprocessableEntity
	switch kind {
	case TypePolicyRemoved:
		title, status = "Policy removed", http.StatusNotFound
	case TypeUnknownPolicy:
		title = "Unknown policy"
	case TypeCostExceedsLimit:
		title = "Cost exceeds the policy's limit"
	}
	return &problem{Type: kind, Title: title, Status: status, Detail: joinDetails(errs), Errors: errs}
}

func joinDetails(errs []fieldError) string {
	ds := make([]string, len(errs))
	for i, e := range errs {
		ds[i] = e.Detail
	}
	return strings.Join(ds, "; ")
}
