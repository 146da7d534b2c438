package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicerl/sluice/auth"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store"
)

// Lease problem types.
const (
	// TypeLeaseUnavailable: 409, every permit of the key is held; the
	// body's retryAfterMs (and Retry-After) says when the first ends at
	// the latest.
	TypeLeaseUnavailable = "urn:sluice:problem:lease-unavailable"
	// TypeLeaseNotHeld: 404, a renew or release of a lease that is not
	// held (released, expired, or never granted). A stale holder's release
	// frees nothing.
	TypeLeaseNotHeld = "urn:sluice:problem:lease-not-held"
	// TypeRateLimited: 429, the rate items of a lease request refused; no
	// lease was taken and nothing was charged.
	TypeRateLimited = "urn:sluice:problem:rate-limited"
)

// Values of the result label of sluice_lease_operations_total.
const (
	leaseOK          = "ok"
	leaseUnavailable = "unavailable"  // acquire: every permit held
	leaseRateLimited = "rate_limited" // acquire with items: a rate refused
	leaseNotHeld     = "not_held"     // renew, release: not held
	leaseInvalid     = "invalid"      // the request was refused before the store
	leaseError       = "error"        // the store failed
)

// registerLeaseMetrics registers sluice_lease_operations_total, with the
// series of every concurrency policy at zero.
func (s *Server) registerLeaseMetrics() error {
	s.leaseOps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_lease_operations_total",
		Help: "Lease operations (acquire, renew, release) by concurrency policy and result (ok, unavailable, rate_limited, not_held, invalid, error). Policies the server does not hold count as policy=\"unknown\".",
	}, []string{"policy", "op", "result"})
	if err := s.reg.Register(s.leaseOps); err != nil {
		return fmt.Errorf("server: register metrics: %w", err)
	}
	return nil // seedMetrics starts the series
}

// countLease counts one lease operation; policy is client input until
// checked, so unknown names count as "unknown".
func (s *Server) countLease(lv *live, policy, op, result string) {
	if info := lv.policies[policy]; info == nil || info.handle.Policy().Algorithm != store.Concurrency {
		policy = policyUnknown
	}
	s.leaseOps.WithLabelValues(policy, op, result).Inc()
}

// leaseResult is the result label of a lease store error.
func leaseResult(err error) string {
	switch {
	case errors.Is(err, store.ErrLeaseNotHeld):
		return leaseNotHeld
	case errors.Is(err, store.ErrInvalidLease), errors.Is(err, store.ErrEmptyKey), errors.Is(err, store.ErrInvalidID),
		errors.Is(err, limiter.ErrShadowInMixed), errors.Is(err, store.ErrInvalidValue), errors.Is(err, store.ErrOutOfRange),
		errors.Is(err, limiter.ErrNotRatePolicy), errors.Is(err, limiter.ErrNotLeasePolicy):
		return leaseInvalid
	}
	return leaseError
}

// Route labels of the lease endpoints.
const (
	routeLeases     = "/v1/leases"
	routeLease      = "/v1/leases/{id}"
	routeLeaseRenew = "/v1/leases/{id}/renew"
)

// leaseRoutes are the lease endpoints.
func (s *Server) leaseRoutes() []route {
	return []route{
		{http.MethodPost, routeLeases, s.acquireLease, auth.Lease},
		{http.MethodGet, routeLeases, s.listLeases, auth.Read},
		{http.MethodPost, routeLeaseRenew, s.renewLease, auth.Lease},
		{http.MethodDelete, routeLease, s.releaseLease, auth.Lease},
	}
}

// leaseBody is the body of POST /v1/leases: a concurrency policy and key,
// an optional holder id (default: a new random one), and optional rate
// items taken all-or-nothing with the lease.
type leaseBody struct {
	Policy string            `json:"policy"`
	Key    string            `json:"key"`
	Holder string            `json:"holder"`
	Items  []json.RawMessage `json:"items"`
}

// leaseJSON is a lease in answers.
type leaseJSON struct {
	ID        string `json:"id"`
	Policy    string `json:"policy"`
	Key       string `json:"key"`
	Holder    string `json:"holder"`
	Token     int64  `json:"token"`
	ExpiresAt string `json:"expiresAt"` // RFC 3339, store clock
	TTLMs     int64  `json:"ttlMs"`
	Permits   int64  `json:"permits"`
}

type leaseAnswer struct {
	leaseJSON
	Held      int64          `json:"held"`
	Decisions []decisionJSON `json:"decisions,omitempty"`
}

// leaseID is the opaque id of a lease in URLs: everything a renew or
// release needs (policy, key, holder, token), so that any server of a
// fleet can answer it. Its only secret is the holder id (96 random bits
// when the server makes it up): the id is handed to the acquirer alone,
// and answers to anyone else (GET /v1/leases) show neither ids nor
// holders, only holder fingerprints (see holderHash).
func leaseID(l store.Lease) string {
	var b bytes.Buffer
	_ = json.NewEncoder(&b).Encode([]any{l.Name, l.Key, l.Holder, l.Token})
	return base64.RawURLEncoding.EncodeToString(bytes.TrimSpace(b.Bytes()))
}

// parseLeaseID reads an id leaseID made. For anything else it returns what
// is wrong with it: not base64url, not the JSON array [policy, key,
// holder, token], a policy name, key or holder that breaks the identifier
// rule, or a token below 1 (every backend issues tokens from 1).
func parseLeaseID(id string) (store.Lease, string) {
	const want = "a lease id is the base64url (no padding) of the JSON array [policy, key, holder, token] that POST /v1/leases answered"
	raw, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil {
		return store.Lease{}, "is not base64url without padding; " + want
	}
	var parts []json.RawMessage
	if !json.Valid(raw) || json.Unmarshal(raw, &parts) != nil || len(parts) != 4 {
		return store.Lease{}, "does not decode to a JSON array of 4 values; " + want
	}
	if p := textProblem(raw, nil); p != nil {
		return store.Lease{}, "holds a string that is not text; " + want
	}
	var l store.Lease
	if json.Unmarshal(parts[0], &l.Name) != nil || json.Unmarshal(parts[1], &l.Key) != nil ||
		json.Unmarshal(parts[2], &l.Holder) != nil || json.Unmarshal(parts[3], &l.Token) != nil {
		return store.Lease{}, "does not hold three strings and an integer token; " + want
	}
	var ie *store.InvalidIDError
	switch err := store.CheckLeaseKey(l.Name, l.Key); {
	case errors.As(err, &ie):
		field := ie.Field
		if field == "name" {
			field = "policy"
		}
		return store.Lease{}, "names a " + field + " that " + ie.Reason
	case err != nil:
		return store.Lease{}, "names a policy and key the lease store refuses: " + err.Error()
	}
	if err := store.CheckHolder(l.Holder); errors.As(err, &ie) {
		return store.Lease{}, "names a holder that " + ie.Reason
	} else if err != nil {
		return store.Lease{}, "names a holder the lease store refuses: " + err.Error()
	}
	if l.Token < 1 {
		return store.Lease{}, fmt.Sprintf("holds token %d; tokens start at 1", l.Token)
	}
	return l, ""
}

// listedLeaseJSON is a lease in GET /v1/leases answers: no id and no
// holder id, which would let anyone renew or release it, but a holder
// fingerprint a holder can recognise its own lease by.
type listedLeaseJSON struct {
	Policy     string `json:"policy"`
	Key        string `json:"key"`
	HolderHash string `json:"holderHash"`
	Token      int64  `json:"token"`
	ExpiresAt  string `json:"expiresAt"`
	TTLMs      int64  `json:"ttlMs"`
	Permits    int64  `json:"permits"`
}

// holderHash is the fingerprint of a holder id in listings: the first 16
// hex digits of its SHA-256.
func holderHash(holder string) string {
	h := sha256.Sum256([]byte(holder))
	return hex.EncodeToString(h[:8])
}

func (s *Server) leaseToJSON(lv *live, l store.Lease) leaseJSON {
	out := leaseJSON{ID: leaseID(l), Policy: l.Name, Key: l.Key, Holder: l.Holder, Token: l.Token,
		ExpiresAt: time.UnixMicro(l.Expires).UTC().Format(time.RFC3339Nano)}
	if h, err := lv.lim.Handle(l.Name); err == nil {
		p := h.Policy()
		out.TTLMs, out.Permits = p.TTL.Milliseconds(), p.Permits
	}
	return out
}

func (s *Server) acquireLease(w http.ResponseWriter, r *http.Request) {
	lv := s.liveOf(r)
	w.Header().Set("Cache-Control", "no-store")
	var body leaseBody
	// The TTL and permits come from the policy, not the request.
	if p := s.readJSON(r, &body, "policy, key, and optionally holder and items; the policy sets permits and ttl"); p != nil {
		writeProblem(w, p)
		return
	}
	var errs fieldErrs
	s.checkLeasePolicy(lv, &errs, body.Policy, "policy")
	if body.Key == "" {
		errs.add(TypeInvalidRequest, []string{"key"}, "is required")
	} else if why := idReason(body.Key, store.MaxIDBytes); why != "" {
		errs.add(TypeInvalidRequest, []string{"key"}, "%s", why)
	}
	if body.Holder == "" {
		var b [12]byte
		_, _ = rand.Read(b[:])
		body.Holder = hex.EncodeToString(b[:])
	} else if why := idReason(body.Holder, store.MaxHolderLen); why != "" {
		errs.add(TypeInvalidRequest, []string{"holder"}, "%s", why)
	}
	// With auth, the holder is bound to the caller's token (auth.go).
	if bound, ok := s.boundHolder(r, body.Holder); !ok {
		errs.add(TypeInvalidRequest, []string{"holder"}, "is too long: with the token name %q before it, it must fit in %d bytes", stateOf(r).principal.Name, store.MaxHolderLen)
	} else {
		body.Holder = bound
	}
	if len(body.Items) > s.maxItems {
		errs.add(TypeInvalidRequest, []string{"items"}, "holds %d items; at most %d are allowed", len(body.Items), s.maxItems)
		body.Items = nil
	}
	reqs := make([]limiter.Request, 0, len(body.Items))
	for i, raw := range body.Items {
		var ti takeItem
		if p := decodeJSON(raw, &ti, []string{"items", strconv.Itoa(i)}, "policy, key and cost"); p != nil {
			writeProblem(w, p)
			return
		}
		v, ierrs := s.validateItem(lv, ti, []string{"items", strconv.Itoa(i)})
		if len(ierrs) == 0 && v.info.handle.Policy().Shadow {
			errs.add(TypeInvalidRequest, []string{"items", strconv.Itoa(i), "policy"}, "names shadow policy %q, which cannot be mixed with a lease", ti.Policy)
		}
		errs = append(errs, ierrs...)
		reqs = append(reqs, v.req)
	}
	if len(errs) > 0 {
		s.countLease(lv, body.Policy, "acquire", leaseInvalid)
		writeProblem(w, invalid(errs))
		return
	}
	ctx := r.Context()
	var (
		res store.AcquireResult
		md  *limiter.MixedDecision
		err error
	)
	if body.Items == nil {
		res, err = lv.lim.Acquire(ctx, body.Policy, body.Key, body.Holder)
	} else {
		var d limiter.MixedDecision
		d, err = lv.lim.AllowAllAcquire(ctx, reqs, limiter.LeaseRequest{Policy: body.Policy, Key: body.Key, Holder: body.Holder})
		res, md = d.Lease, &d
	}
	if err != nil {
		s.countLease(lv, body.Policy, "acquire", leaseResult(err))
		s.leaseStoreError(w, err)
		return
	}
	var decisions []decisionJSON
	if md != nil {
		for _, d := range md.Decisions {
			decisions = append(decisions, toJSON(d))
		}
	}
	s.observeLease(body.Policy, body.Key, body.Holder, res.Acquired && (md == nil || md.Allowed))
	if res.Acquired && (md == nil || md.Allowed) {
		s.countLease(lv, body.Policy, "acquire", leaseOK)
		ans := leaseAnswer{leaseJSON: s.leaseToJSON(lv, res.Lease), Held: res.Held, Decisions: decisions}
		w.Header().Set("Location", "/v1/leases/"+ans.ID)
		writeJSON(w, http.StatusCreated, contentJSON, ans)
		return
	}
	type refusal struct {
		problem
		RetryAfterMs int64          `json:"retryAfterMs"`
		Held         int64          `json:"held"`
		Decisions    []decisionJSON `json:"decisions,omitempty"`
	}
	out := refusal{Held: res.Held, Decisions: decisions}
	retry := res.RetryAfter
	if md != nil && !res.Acquired && md.RetryAfter > retry {
		retry = md.RetryAfter
	}
	if md != nil && res.RetryAfter == 0 && !md.Allowed {
		// The lease was not refused (a refused lease has a RetryAfter: when
		// the first holder's lease ends): the rates refused. (Held says
		// nothing here: a holder asking again for its own permit may find
		// every permit held.)
		retry = md.RetryAfter
		out.problem = problem{Type: TypeRateLimited, Title: "Rate limited", Status: http.StatusTooManyRequests,
			Detail: "the rate items refused; no lease was taken and nothing was charged"}
		s.countLease(lv, body.Policy, "acquire", leaseRateLimited)
	} else {
		out.problem = problem{Type: TypeLeaseUnavailable, Title: "Lease unavailable", Status: http.StatusConflict,
			Detail: fmt.Sprintf("all %d permits of policy %q for this key are held", s.permits(lv, body.Policy), body.Policy)}
		s.countLease(lv, body.Policy, "acquire", leaseUnavailable)
	}
	out.RetryAfterMs = ceilMillis(retry)
	w.Header().Set("Retry-After", strconv.FormatInt(int64((retry+time.Second-1)/time.Second), 10))
	writeJSON(w, out.Status, contentProblem, out)
}

func (s *Server) permits(lv *live, policy string) int64 {
	h, err := lv.lim.Handle(policy)
	if err != nil {
		return 0
	}
	return h.Policy().Permits
}

// checkLeasePolicy validates the policy of a lease request, found at path,
// adding to errs what is wrong with it. It reports whether it is valid.
func (s *Server) checkLeasePolicy(lv *live, errs *fieldErrs, policy string, path ...string) bool {
	switch info := lv.policies[policy]; {
	case policy == "":
		errs.add(TypeInvalidRequest, path, "is required")
	case info == nil && lv.removed[policy]:
		errs.add(TypePolicyRemoved, path, "names policy %q, which a configuration reload removed", truncate(policy, 64))
	case info == nil:
		errs.add(TypeUnknownPolicy, path, "names an unknown policy %q; GET /v1/policies lists them", truncate(policy, 64))
	case info.handle.Policy().Algorithm != store.Concurrency:
		errs.add(TypeInvalidRequest, path, "names %s policy %q, not concurrency: leases need a concurrency policy", info.handle.Policy().Algorithm, policy)
	default:
		return true
	}
	return false
}

// leaseFromPath reads the lease id of a renew or release. An id that is
// not one leaseID could have made is the caller's mistake, a 422 naming
// what is wrong with it, and touches no store; a well-formed id of a
// policy this server holds no concurrency policy by (one removed since, or
// another server's) names no lease held here, a 404 (policy-removed for
// one a reload removed).
func (s *Server) leaseFromPath(lv *live, w http.ResponseWriter, r *http.Request, op string) (store.Lease, bool) {
	l, why := parseLeaseID(r.PathValue("id"))
	if why != "" {
		s.countLease(lv, "", op, leaseInvalid)
		writeProblem(w, invalid([]fieldError{{Pointer: "#/path/id", kind: TypeInvalidRequest, Detail: "path parameter id " + why}}))
		return store.Lease{}, false
	}
	if s.checkLeasePolicy(lv, new(fieldErrs), l.Name) {
		if !s.holderOf(w, r, l) { // auth.go
			s.countLease(lv, l.Name, op, leaseInvalid)
			return store.Lease{}, false
		}
		return l, true
	}
	if lv.policies[l.Name] == nil && lv.removed[l.Name] {
		s.countLease(lv, l.Name, op, leaseNotHeld)
		writePolicyRemoved(w, l.Name)
		return store.Lease{}, false
	}
	s.countLease(lv, l.Name, op, leaseNotHeld)
	writeProblem(w, &problem{Type: TypeLeaseNotHeld, Title: "Lease not held", Status: http.StatusNotFound,
		Detail: fmt.Sprintf("no such lease: the id names policy %q, which is not a concurrency policy of this server", truncate(l.Name, 64))})
	return store.Lease{}, false
}

func (s *Server) renewLease(w http.ResponseWriter, r *http.Request) {
	lv := s.liveOf(r)
	w.Header().Set("Cache-Control", "no-store")
	l, ok := s.leaseFromPath(lv, w, r, "renew")
	if !ok {
		return
	}
	got, err := lv.lim.Renew(r.Context(), l.Name, l.Key, l.Holder, l.Token)
	if err != nil {
		s.countLease(lv, l.Name, "renew", leaseResult(err))
		s.leaseStoreError(w, err)
		return
	}
	s.countLease(lv, l.Name, "renew", leaseOK)
	writeJSON(w, http.StatusOK, contentJSON, s.leaseToJSON(lv, got))
}

func (s *Server) releaseLease(w http.ResponseWriter, r *http.Request) {
	lv := s.liveOf(r)
	l, ok := s.leaseFromPath(lv, w, r, "release")
	if !ok {
		return
	}
	if err := lv.lim.Release(r.Context(), l.Name, l.Key, l.Holder, l.Token); err != nil {
		s.countLease(lv, l.Name, "release", leaseResult(err))
		s.leaseStoreError(w, err)
		return
	}
	s.countLease(lv, l.Name, "release", leaseOK)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listLeases(w http.ResponseWriter, r *http.Request) {
	lv := s.liveOf(r)
	w.Header().Set("Cache-Control", "no-store")
	q := r.URL.Query()
	key, policy := q.Get("key"), q.Get("policy")
	var errs fieldErrs
	if key == "" {
		errs.add(TypeInvalidRequest, []string{"query", "key"}, "is required")
	} else if why := idReason(key, store.MaxIDBytes); why != "" {
		errs.add(TypeInvalidRequest, []string{"query", "key"}, "%s", why)
	}
	if policy == "" {
		// One concurrency policy needs no naming.
		var only []string
		for _, p := range lv.lim.Policies() {
			if p.Algorithm == store.Concurrency {
				only = append(only, p.Name)
			}
		}
		if len(only) == 1 {
			policy = only[0]
		} else {
			errs.add(TypeInvalidRequest, []string{"query", "policy"}, "is required: the server holds %d concurrency policies", len(only))
		}
	} else {
		s.checkLeasePolicy(lv, &errs, policy, "query", "policy")
	}
	if len(errs) > 0 {
		writeProblem(w, invalid(errs))
		return
	}
	hs, err := lv.lim.Holders(r.Context(), policy, key)
	if err != nil {
		s.leaseStoreError(w, err)
		return
	}
	out := struct {
		Leases []listedLeaseJSON `json:"leases"`
	}{Leases: make([]listedLeaseJSON, 0, len(hs))}
	for _, l := range hs {
		j := s.leaseToJSON(lv, l)
		out.Leases = append(out.Leases, listedLeaseJSON{Policy: j.Policy, Key: j.Key, HolderHash: holderHash(l.Holder),
			Token: j.Token, ExpiresAt: j.ExpiresAt, TTLMs: j.TTLMs, Permits: j.Permits})
	}
	writeJSON(w, http.StatusOK, contentJSON, out)
}

// leaseStoreError answers a lease error.
func (s *Server) leaseStoreError(w http.ResponseWriter, err error) {
	switch leaseResult(err) {
	case leaseNotHeld:
		writeProblem(w, &problem{Type: TypeLeaseNotHeld, Title: "Lease not held", Status: http.StatusNotFound,
			Detail: "the lease is not held: it was released, it expired, or a successor holds the permit"})
	case leaseInvalid:
		writeProblem(w, &problem{Type: TypeInvalidRequest, Status: http.StatusUnprocessableEntity,
			Detail: "the store refused the request: " + err.Error()})
	default:
		if !errors.Is(err, context.Canceled) {
			s.log.Error("server: lease store failed", "err", err)
		}
		w.Header().Set("Retry-After", "1")
		writeProblem(w, &problem{Type: TypeStoreUnavailable, Title: "Lease store unavailable",
			Status: http.StatusServiceUnavailable, Detail: "the lease store could not answer; try again"})
	}
}
