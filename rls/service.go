package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store"
)

// HeaderMode selects the response headers ShouldRateLimit asks Envoy to
// add to the client's response.
type HeaderMode uint8

const (
	// HeadersXRateLimit (the zero value) adds X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset (whole seconds), as
	// envoyproxy/ratelimit does with LIMIT_RESPONSE_HEADERS_ENABLED and
	// those header names.
	HeadersXRateLimit HeaderMode = iota
	// HeadersNone adds no header.
	HeadersNone
	// HeadersIETF adds draft-ietf-httpapi-ratelimit-headers'
	// RateLimit-Policy ("policy";q=limit;w=seconds) and RateLimit
	// ("policy";r=remaining;t=seconds).
	HeadersIETF
	// HeadersBoth adds both sets.
	HeadersBoth
)

// String returns the mode's name as ParseHeaderMode reads it.
func (m HeaderMode) String() string {
	switch m {
	case HeadersXRateLimit:
		return "x-ratelimit"
	case HeadersNone:
		return "none"
	case HeadersIETF:
		return "ietf"
	case HeadersBoth:
		return "both"
	}
	return fmt.Sprintf("HeaderMode(%d)", uint8(m))
}

// ParseHeaderMode parses x-ratelimit, ietf, both or none.
func ParseHeaderMode(s string) (HeaderMode, error) {
	for _, m := range []HeaderMode{HeadersXRateLimit, HeadersNone, HeadersIETF, HeadersBoth} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("rls: unknown header mode %q (want x-ratelimit, ietf, both or none)", s)
}

// Defaults for the zero fields of Config.
const (
	DefaultNearLimitRatio    = 0.8
	DefaultMaxDetailedSeries = 1000
	DefaultMaxDescriptors    = 64
	// MaxEntries bounds the entries of one request descriptor.
	MaxEntries = 32
)

// Config configures a Service. Zero fields take the documented defaults.
type Config struct {
	// Rules are the envoyproxy/ratelimit rules to enforce. Required.
	Rules *Rules
	// Limiter decides. It must hold Rules.Policies() (New checks), and
	// may hold the HTTP API's own policies beside them: descriptors and
	// the HTTP API then share their state, on whatever store the Limiter
	// decides with. Required.
	Limiter *limiter.Limiter
	// Registry receives the metrics (see metrics.go). Nil keeps them
	// unregistered.
	Registry prometheus.Registerer
	// Logger receives store errors. Nil discards them.
	Logger *slog.Logger
	// Headers selects the response headers; the zero value is
	// HeadersXRateLimit.
	Headers HeaderMode
	// NearLimitRatio is the share of a limit above which admitted hits
	// count as near_limit, as envoyproxy/ratelimit's NEAR_LIMIT_RATIO.
	// Zero means DefaultNearLimitRatio (0.8).
	NearLimitRatio float64
	// MaxDetailedSeries bounds the metric series that detailed_metric and
	// value_to_metric rules create from request values; past it, such a
	// rule's hits are counted under its configured key. Zero means
	// DefaultMaxDetailedSeries.
	MaxDetailedSeries int
	// MaxDescriptors bounds the descriptors of one request; a request with
	// more is refused with InvalidArgument. Zero means
	// DefaultMaxDescriptors.
	MaxDescriptors int
}

// Service answers envoy.service.ratelimit.v3.RateLimitService over a
// limiter.Limiter. Register it on a grpc.Server (NewServer does, with
// health and reflection). It is safe for concurrent use. Build it with
// New; the zero value is not usable.
type Service struct {
	pb.UnimplementedRateLimitServiceServer

	rules   *Rules
	lim     *limiter.Limiter
	log     *slog.Logger
	headers HeaderMode
	near    float64
	maxDesc int
	leaves  []leafState // by leaf.idx
	metrics *metrics
	over    overrides // override.go
}

// leafState is what the Service precomputes for one rate_limit.
type leafState struct {
	l        *leaf
	handle   *limiter.Handle // nil unless l.limits()
	limit    *pb.RateLimitResponse_RateLimit
	stats    *counters // under the configured key
	ietfPol  string    // RateLimit-Policy member
	limitStr string    // requests_per_unit, for X-RateLimit-Limit
	nearAt   int64     // hits above it are near the limit
}

// New returns a Service for cfg.
func New(cfg Config) (*Service, error) {
	if cfg.Rules == nil {
		return nil, errors.New("rls: config: Rules is required")
	}
	if cfg.Limiter == nil {
		return nil, errors.New("rls: config: Limiter is required")
	}
	if cfg.NearLimitRatio < 0 || cfg.NearLimitRatio > 1 || math.IsNaN(cfg.NearLimitRatio) {
		return nil, fmt.Errorf("rls: config: NearLimitRatio must be in [0, 1], got %v", cfg.NearLimitRatio)
	}
	if cfg.MaxDetailedSeries < 0 || cfg.MaxDescriptors < 0 {
		return nil, errors.New("rls: config: MaxDetailedSeries and MaxDescriptors must be >= 0")
	}
	if cfg.Headers > HeadersBoth {
		return nil, fmt.Errorf("rls: config: unknown %s", cfg.Headers)
	}
	s := &Service{
		rules:   cfg.Rules,
		lim:     cfg.Limiter,
		log:     cfg.Logger,
		headers: cfg.Headers,
		near:    cmpOr(cfg.NearLimitRatio, DefaultNearLimitRatio),
		maxDesc: cmpOr(cfg.MaxDescriptors, DefaultMaxDescriptors),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(cfg.Registry, cmpOr(cfg.MaxDetailedSeries, DefaultMaxDetailedSeries))
	if err != nil {
		return nil, err
	}
	s.metrics = m
	s.leaves = make([]leafState, len(cfg.Rules.leaves))
	for i, l := range cfg.Rules.leaves {
		ls := &s.leaves[i]
		ls.l = l
		ls.stats = m.series(l.domain, l.statKey)
		if l.unlimited {
			continue
		}
		ls.limit = &pb.RateLimitResponse_RateLimit{
			Name:            l.name,
			RequestsPerUnit: l.rpu,
			Unit:            protoUnit(l.unitName),
		}
		ls.nearAt = int64(math.Floor(float64(l.rpu) * s.near))
		ls.ietfPol = policyItem(l)
		ls.limitStr = strconv.FormatUint(uint64(l.rpu), 10)
		if !l.limits() {
			continue
		}
		h, err := cfg.Limiter.Handle(l.policy)
		if err != nil {
			return nil, fmt.Errorf("rls: the limiter does not hold the policies of the rules (give it Rules.Policies()): %w", err)
		}
		p := h.Policy()
		if p.Rate != int64(l.rpu) || p.Period != l.period() || p.Algorithm != store.GCRA {
			return nil, fmt.Errorf("rls: the limiter's policy %q is not the one the rules define (%d per %s)", l.policy, l.rpu, l.period())
		}
		ls.handle = h
	}
	return s, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func protoUnit(name string) pb.RateLimitResponse_RateLimit_Unit {
	return pb.RateLimitResponse_RateLimit_Unit(pb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(name)])
}

// Rules returns the rules the Service enforces.
func (s *Service) Rules() *Rules { return s.rules }

// item is one request descriptor on its way to a decision.
type item struct {
	ls    *leafState
	key   string
	cost  int64
	hits  uint64
	stats *counters
	over  bool // refused without the store: requests_per_unit 0, or more hits than the limit
	take  bool // decided by the store, all or nothing
	late  bool // a limit override, decided after the others (override.go)
	dec   limiter.Decision
}

// ShouldRateLimit decides a request: every descriptor that matches a rate
// limit is charged its hits (the descriptor's hits_addend when set, else
// the request's, 0 meaning 1), all of them or none (the enforced ones are
// taken in one all-or-nothing store operation); the answer is OVER_LIMIT
// when any of them is over its limit and not in shadow or quota mode.
//
// A request without a domain or descriptors, or with too many, is
// InvalidArgument. A store that fails, or that is down while the policies
// fail closed, is Unavailable: Envoy then applies its own
// failure_mode_deny (by default it lets the request through), as with
// envoyproxy/ratelimit when its Redis fails.
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	start := time.Now()
	resp, code, err := s.decide(ctx, req)
	s.metrics.observe(code, time.Since(start))
	return resp, err
}

func (s *Service) decide(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, string, error) {
	switch {
	case req.GetDomain() == "":
		return nil, codeInvalid, status.Error(codes.InvalidArgument, "rls: rate limit domain must not be empty")
	case len(req.GetDescriptors()) == 0:
		return nil, codeInvalid, status.Error(codes.InvalidArgument, "rls: rate limit descriptor list must not be empty")
	case len(req.Descriptors) > s.maxDesc:
		return nil, codeInvalid, status.Errorf(codes.InvalidArgument, "rls: %d descriptors, more than the %d a request may carry", len(req.Descriptors), s.maxDesc)
	}
	d := s.rules.domains[req.Domain]
	items := make([]item, len(req.Descriptors))
	var replaced []string
	var path [MaxEntries]*node
	var wild [MaxEntries]bool
	for i, desc := range req.Descriptors {
		entries := desc.GetEntries()
		if len(entries) > MaxEntries {
			return nil, codeInvalid, status.Errorf(codes.InvalidArgument, "rls: descriptors[%d] has %d entries, more than %d", i, len(entries), MaxEntries)
		}
		if d == nil {
			continue // an unknown domain limits nothing, as in envoyproxy/ratelimit
		}
		clear(path[:len(entries)])
		clear(wild[:len(entries)])
		it := &items[i]
		var l *leaf
		if o := desc.GetLimit(); o != nil {
			ls, err := s.override(req.Domain, o)
			if err != nil {
				return nil, codeInvalid, status.Errorf(codes.InvalidArgument, "rls: descriptors[%d]: %v", i, err)
			}
			it.ls, it.late, l = ls, true, ls.l
		} else {
			if l = d.lookup(entries, path[:len(entries)], wild[:len(entries)]); l == nil {
				continue
			}
			it.ls = &s.leaves[l.idx]
			replaced = append(replaced, l.replaces...)
		}
		if l.unlimited {
			continue
		}
		it.hits = hitsOf(req, desc)
		if desc.GetIsNegativeHits() {
			// Refunds are not supported: check without charging.
			it.hits = 0
		}
		it.stats = it.ls.stats
		if !it.late {
			it.stats = s.metrics.forRequest(it.ls, entries, path[:len(entries)], wild[:len(entries)])
		}
		it.key = descriptorKey(entries, path[:len(entries)], wild[:len(entries)])
		switch {
		case !l.limits() || it.hits > uint64(l.rpu):
			it.over = true
		default:
			it.cost, it.take = int64(it.hits), !it.late
		}
	}
	if len(replaced) > 0 {
		for i := range items {
			if it := &items[i]; it.ls != nil && it.ls.l.name != "" && contains(replaced, it.ls.l.name) {
				*it = item{}
			}
		}
	}
	if err := s.take(ctx, items); err != nil {
		return nil, errCode(err), err
	}
	if err := s.takeLate(ctx, items); err != nil {
		return nil, errCode(err), err
	}
	return s.respond(items), codeOf(items), nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// hitsOf is envoyproxy/ratelimit's rule: the descriptor's hits_addend
// when set (0 checks without charging), else the request's, 0 meaning 1.
func hitsOf(req *pb.RateLimitRequest, desc *ratelimitv3.RateLimitDescriptor) uint64 {
	if h := desc.GetHitsAddend(); h != nil {
		return h.GetValue()
	}
	return uint64(max(1, req.GetHitsAddend()))
}

// take decides the items that go to the store, all or nothing.
func (s *Service) take(ctx context.Context, items []item) error {
	n, refused := 0, false
	var one *item
	for i := range items {
		it := &items[i]
		if it.take {
			n++
			one = it
		}
		if it.over && !it.ls.l.shadow && !it.ls.l.quota {
			refused = true
		}
	}
	if n == 0 {
		return nil
	}
	if refused {
		// The request is over a limit whatever the store says: look at
		// the others without charging them.
		for i := range items {
			items[i].cost = 0
		}
	}
	if n == 1 {
		d, err := one.ls.handle.AllowN(ctx, one.key, one.cost)
		if err != nil {
			return s.storeError(err)
		}
		one.dec = d
		return fallbackError(d)
	}
	reqs := make([]limiter.Request, 0, n)
	for i := range items {
		if it := &items[i]; it.take {
			reqs = append(reqs, limiter.Request{Policy: it.ls.l.policy, Key: it.key, Cost: it.cost})
		}
	}
	md, err := s.lim.AllowAll(ctx, reqs)
	if err != nil {
		return s.storeError(err)
	}
	j := 0
	for i := range items {
		if it := &items[i]; it.take {
			it.dec = md.Decisions[j]
			j++
			if err := fallbackError(it.dec); err != nil {
				return err
			}
		}
	}
	return nil
}

// fallbackError turns a denial that the store did not decide (it is down
// and the policy fails closed, or it did not answer in time) into
// Unavailable, so that Envoy's failure_mode_deny decides, not a store
// outage disguised as OVER_LIMIT. fail_open and local answers stand.
func fallbackError(d limiter.Decision) error {
	if d.Fallback == store.NoFallback || d.Allowed {
		return nil
	}
	return status.Errorf(codes.Unavailable, "rls: the shared store did not decide (%s, %s)", d.Fallback, d.FallbackMode)
}

// storeError maps a limiter error: the request's own fault is
// InvalidArgument, anything else Unavailable.
func (s *Service) storeError(err error) error {
	if errors.Is(err, store.ErrInvalidID) || errors.Is(err, store.ErrInvalidValue) || errors.Is(err, store.ErrOutOfRange) ||
		errors.Is(err, store.ErrCostExceedsLimit) || errors.Is(err, store.ErrNegativeCost) {
		return status.Errorf(codes.InvalidArgument, "rls: %v", err)
	}
	s.log.Error("rls: store error", "err", err)
	return status.Errorf(codes.Unavailable, "rls: store: %v", err)
}

// respond builds the response and counts the hits.
func (s *Service) respond(items []item) *pb.RateLimitResponse {
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, len(items))}
	// One allocation each for the statuses and their durations.
	sts := make([]pb.RateLimitResponse_DescriptorStatus, len(items))
	durs := make([]durationpb.Duration, len(items))
	var pick *item
	var pickStatus *pb.RateLimitResponse_DescriptorStatus
	for i := range items {
		it := &items[i]
		st := &sts[i]
		st.Code = pb.RateLimitResponse_OK
		resp.Statuses[i] = st
		switch {
		case it.ls == nil:
			continue // no limit applies
		case it.ls.l.unlimited:
			st.LimitRemaining = math.MaxUint32
			continue
		}
		l := it.ls.l
		st.CurrentLimit = it.ls.limit
		soft := l.shadow || l.quota
		over := it.over || !it.dec.Allowed || it.dec.Shadowed
		st.DurationUntilReset = &durs[i]
		if it.over {
			durs[i].Seconds = seconds(l.period())
		} else {
			st.LimitRemaining = uint32(min(max(it.dec.Remaining, 0), math.MaxUint32))
			if over {
				durs[i].Seconds = seconds(it.dec.RetryAfter)
			} else {
				durs[i].Seconds = seconds(it.dec.ResetAfter)
			}
		}
		if over && !soft {
			st.Code = pb.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
		}
		s.count(it, over)
		if pick == nil || pickStatus.Code == pb.RateLimitResponse_OK &&
			(st.Code == pb.RateLimitResponse_OVER_LIMIT || st.LimitRemaining < pickStatus.LimitRemaining) {
			pick, pickStatus = it, st
		}
	}
	if pick != nil && s.headers != HeadersNone {
		resp.ResponseHeadersToAdd = s.headersFor(pick, pickStatus)
	}
	return resp
}

// count adds an item's hits to its counters, as envoyproxy/ratelimit
// counts them: every hit in total_hits; over_limit (and shadow_mode for a
// shadow or quota rule) when over; otherwise within_limit, and
// near_limit for the hits past NearLimitRatio of the limit.
func (s *Service) count(it *item, over bool) {
	c, hits := it.stats, float64(it.hits)
	c.total.Add(hits)
	if over {
		c.over.Add(hits)
		if it.ls.l.shadow || it.ls.l.quota {
			c.shadow.Add(hits)
		}
		return
	}
	c.within.Add(hits)
	used := int64(it.ls.l.rpu) - it.dec.Remaining
	if before := used - int64(it.hits); used > it.ls.nearAt {
		c.near.Add(float64(used - max(it.ls.nearAt, before)))
	}
}

// seconds rounds d up to whole seconds, as Envoy reads the duration.
func seconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return max(s, 0)
}

func (s *Service) headersFor(it *item, st *pb.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	// The headers in one allocation, their pointers in another.
	x := s.headers == HeadersXRateLimit || s.headers == HeadersBoth
	ietf := s.headers == HeadersIETF || s.headers == HeadersBoth
	count := 0
	if x {
		count += 3
	}
	if ietf {
		count += 2
	}
	hv := make([]corev3.HeaderValue, count)
	n := 0
	add := func(k, v string) {
		hv[n].Key, hv[n].Value = k, v
		n++
	}
	reset := strconv.FormatInt(st.DurationUntilReset.GetSeconds(), 10)
	remaining := strconv.FormatUint(uint64(st.LimitRemaining), 10)
	if x {
		add("x-ratelimit-limit", it.ls.limitStr)
		add("x-ratelimit-remaining", remaining)
		add("x-ratelimit-reset", reset)
	}
	if ietf {
		add("ratelimit-policy", it.ls.ietfPol)
		add("ratelimit", sfString(it.ls.l.policy)+";r="+remaining+";t="+reset)
	}
	out := make([]*corev3.HeaderValue, n)
	for i := range out {
		out[i] = &hv[i]
	}
	return out
}

// policyItem is a rule's RateLimit-Policy member: q = requests_per_unit,
// w = the period in seconds.
func policyItem(l *leaf) string {
	return sfString(l.policy) + ";q=" + strconv.FormatUint(uint64(l.rpu), 10) + ";w=" + strconv.FormatInt(int64(l.period()/time.Second), 10)
}

// sfString writes s as a Structured Field string. Policy names hold only
// printable ASCII without '"' or '\', so no escaping is needed.
func sfString(s string) string { return `"` + s + `"` }

const (
	codeOK          = "ok"
	codeOverLimit   = "over_limit"
	codeInvalid     = "invalid_argument"
	codeUnavailable = "unavailable"
)

func codeOf(items []item) string {
	for i := range items {
		it := &items[i]
		if it.ls != nil && !it.ls.l.unlimited && !it.ls.l.shadow && !it.ls.l.quota && (it.over || !it.dec.Allowed) {
			return codeOverLimit
		}
	}
	return codeOK
}

func errCode(err error) string {
	if status.Code(err) == codes.InvalidArgument {
		return codeInvalid
	}
	return codeUnavailable
}
