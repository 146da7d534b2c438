package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
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
}

type multiJSON struct {
	Allowed      bool           `json:"allowed"`
	RetryAfterMs int64          `json:"retryAfterMs"`
	Items        []decisionJSON `json:"items"`
}

func toJSON(d limiter.Decision) decisionJSON {
	return decisionJSON{
		Allowed:      d.Allowed,
		Policy:       d.Policy,
		Limit:        d.Limit,
		Remaining:    d.Remaining,
		RetryAfterMs: ceilMillis(d.RetryAfter),
		ResetAfterMs: ceilMillis(d.ResetAfter),
		Shadowed:     d.Shadowed,
	}
}

// validated is one checked item of a take.
type validated struct {
	info *policyInfo
	req  limiter.Request
}

// contentTypeProblem is the 415 for a request body that is not JSON, or nil.
func contentTypeProblem(r *http.Request) *problem {
	ct := r.Header.Get("Content-Type")
	if isJSON(ct) {
		return nil
	}
	detail := "Content-Type must be application/json"
	if ct == "" {
		detail += "; the request has none"
	} else {
		detail += fmt.Sprintf(", not %q", truncate(ct, 64))
	}
	return &problem{Type: typeBlank, Status: http.StatusUnsupportedMediaType, Detail: detail}
}

func (s *Server) take(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if p := contentTypeProblem(r); p != nil {
		writeProblem(w, p)
		return
	}
	body, p := s.decode(r.Body)
	if p != nil {
		writeProblem(w, p)
		return
	}
	multi := body.Items != nil
	items, errs := s.validate(body)
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
		s.takeOne(r.Context(), w, items[0])
		return
	}
	s.takeAll(r.Context(), w, items)
}

func (s *Server) takeOne(ctx context.Context, w http.ResponseWriter, it validated) {
	start := time.Now()
	d, err := it.info.handle.AllowN(ctx, it.req.Key, it.req.Cost)
	s.metrics.duration.WithLabelValues(it.req.Policy).Observe(time.Since(start).Seconds())
	if err != nil {
		s.metrics.decisions.WithLabelValues(it.req.Policy, resultError).Inc()
		s.storeError(w, err, "#")
		return
	}
	s.count(d, d.Allowed)
	s.setRateLimitHeaders(w.Header(), []limiter.Decision{d})
	status := http.StatusOK
	if !d.Allowed {
		status = http.StatusTooManyRequests
		w.Header().Set("Retry-After", retryAfterSeconds(d.RetryAfter))
	}
	writeJSON(w, status, contentJSON, toJSON(d))
}

func (s *Server) takeAll(ctx context.Context, w http.ResponseWriter, items []validated) {
	reqs := make([]limiter.Request, len(items))
	for i, it := range items {
		reqs[i] = it.req
	}
	start := time.Now()
	md, err := s.lim.AllowAll(ctx, reqs)
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
		s.count(d, md.Allowed)
		out.Items[i] = toJSON(d)
	}
	s.setRateLimitHeaders(w.Header(), md.Decisions)
	status := http.StatusOK
	if !md.Allowed {
		status = http.StatusTooManyRequests
		w.Header().Set("Retry-After", retryAfterSeconds(md.RetryAfter))
	}
	writeJSON(w, status, contentJSON, out)
}

// count records a decision. granted is whether the request as a whole was
// granted: an item of a refused all-or-nothing request counts as denied
// (nothing was charged) even if its own policy had room.
func (s *Server) count(d limiter.Decision, granted bool) {
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
		errors.Is(err, limiter.ErrUnknownPolicy):
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

// isJSON reports whether a Content-Type names JSON: application/json or
// application/*+json, with any parameters.
func isJSON(ct string) bool {
	if ct == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")
}

// decode reads a take body strictly: one JSON object, no unknown fields,
// nothing after it.
func (s *Server) decode(r io.Reader) (*takeBody, *problem) {
	var body takeBody
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return nil, s.decodeProblem(err, nil)
	}
	var extra json.RawMessage
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err == nil || isSyntaxError(err):
		return nil, &problem{Type: TypeMalformedRequest, Status: http.StatusBadRequest,
			Detail: "request body has data after the JSON object; send exactly one object"}
	default:
		return nil, s.decodeProblem(err, nil)
	}
	if len(body.Items) > s.maxItems {
		// Before decoding each item: a body of a million "{}" is cheap to
		// send and should be cheap to refuse.
		return nil, invalid([]fieldError{{Pointer: pointer("items"), kind: TypeInvalidRequest,
			Detail: fmt.Sprintf("items holds %d items; at most %d are allowed", len(body.Items), s.maxItems)}})
	}
	var errs []fieldError
	body.items = make([]takeItem, len(body.Items))
	for i, raw := range body.Items {
		d := json.NewDecoder(bytes.NewReader(raw))
		d.DisallowUnknownFields()
		if err := d.Decode(&body.items[i]); err != nil {
			p := s.decodeProblem(err, []string{"items", strconv.Itoa(i)})
			errs = append(errs, p.Errors...)
		}
	}
	if len(errs) > 0 {
		return nil, &problem{Type: TypeMalformedRequest, Status: http.StatusBadRequest,
			Detail: joinDetails(errs), Errors: errs}
	}
	return &body, nil
}

func isSyntaxError(err error) bool {
	var se *json.SyntaxError
	return errors.As(err, &se) || errors.Is(err, io.ErrUnexpectedEOF)
}

// decodeProblem turns a JSON decoding error into a problem. at is the
// pointer of the value being decoded.
func (s *Server) decodeProblem(err error, at []string) *problem {
	var (
		mbe *http.MaxBytesError
		se  *json.SyntaxError
		ute *json.UnmarshalTypeError
	)
	malformed := func(detail string, ptr ...string) *problem {
		p := &problem{Type: TypeMalformedRequest, Status: http.StatusBadRequest, Detail: detail}
		if ptr != nil {
			p.Errors = []fieldError{{Pointer: pointer(ptr...), Detail: detail}}
		} else if at != nil {
			p.Errors = []fieldError{{Pointer: pointer(at...), Detail: detail}}
		}
		return p
	}
	where := func(field string) []string {
		path := append([]string(nil), at...)
		if field != "" {
			path = append(path, strings.Split(field, ".")...)
		}
		return path
	}
	switch {
	case errors.As(err, &mbe):
		return &problem{Type: typeBlank, Status: http.StatusRequestEntityTooLarge,
			Detail: fmt.Sprintf("request body is larger than %d bytes", s.maxBody)}
	case errors.Is(err, io.EOF):
		return malformed("request body is empty; want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return malformed("request body ends in the middle of a JSON value")
	case errors.As(err, &se):
		return malformed(fmt.Sprintf("malformed JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: ")))
	case errors.As(err, &ute):
		path := where(ute.Field)
		name := "request body"
		if len(path) > 0 {
			name = strings.Join(path, ".")
		}
		return malformed(fmt.Sprintf("%s must be %s, got a JSON %s", name, jsonKind(ute.Type.Kind().String()), ute.Value), path...)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field, uerr := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		if uerr != nil {
			field = "?"
		}
		path := where(field)
		return malformed(fmt.Sprintf("unknown field %q (want policy, key and cost, or items)", truncate(field, 64)), path...)
	default:
		return malformed("request body is not valid JSON: " + strings.TrimPrefix(err.Error(), "json: "))
	}
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "slice", "array":
		return "an array"
	case "struct", "map":
		return "an object"
	case "bool":
		return "true or false"
	}
	return "a number"
}

// validate checks every field of a decoded body against the limits of the
// API and the server's policies. It returns one validated item per item of
// the request (info nil for an unknown policy) and every problem found.
func (s *Server) validate(body *takeBody) ([]validated, []fieldError) {
	if body.Items == nil {
		it, errs := s.validateItem(takeItem{Policy: body.Policy, Key: body.Key, Cost: body.Cost}, nil)
		return []validated{it}, errs
	}
	var errs []fieldError
	if body.Policy != "" || body.Key != "" || (body.Cost != nil && string(body.Cost) != "null") {
		errs = append(errs, fieldError{Pointer: pointer("items"), kind: TypeInvalidRequest,
			Detail: "give either policy, key and cost, or items; not both"})
	}
	if len(body.items) == 0 {
		errs = append(errs, fieldError{Pointer: pointer("items"), kind: TypeInvalidRequest,
			Detail: "items must not be empty"})
		return nil, errs
	}
	out := make([]validated, len(body.items))
	for i, ti := range body.items {
		it, ierrs := s.validateItem(ti, []string{"items", strconv.Itoa(i)})
		out[i] = it
		errs = append(errs, ierrs...)
	}
	return out, errs
}

func (s *Server) validateItem(ti takeItem, at []string) (validated, []fieldError) {
	var errs []fieldError
	field := func(name string) (ptr, label string) {
		path := append(append([]string(nil), at...), name)
		return pointer(path...), strings.Join(path, ".")
	}
	add := func(name, kind, format string, args ...any) {
		ptr, label := field(name)
		errs = append(errs, fieldError{Pointer: ptr, kind: kind, Detail: label + " " + fmt.Sprintf(format, args...)})
	}
	v := validated{req: limiter.Request{Policy: ti.Policy, Key: ti.Key, Cost: 1}}
	if ti.Policy == "" {
		add("policy", TypeInvalidRequest, "is required")
	} else if v.info = s.policies[ti.Policy]; v.info == nil {
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
	title := "Invalid request"
	switch kind {
	case TypeUnknownPolicy:
		title = "Unknown policy"
	case TypeCostExceedsLimit:
		title = "Cost exceeds the policy's limit"
	}
	return &problem{Type: kind, Title: title, Status: http.StatusUnprocessableEntity, Detail: joinDetails(errs), Errors: errs}
}

func joinDetails(errs []fieldError) string {
	ds := make([]string, len(errs))
	for i, e := range errs {
		ds[i] = e.Detail
	}
	return strings.Join(ds, "; ")
}
