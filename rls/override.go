package rls

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicerl/sluice/limiter"
)

// A descriptor may carry its own limit (Envoy's limit override, set from
// route metadata): it then replaces the configured one, as in
// envoyproxy/ratelimit. Each distinct override (domain, requests per unit,
// unit, multiplier) is a GCRA policy of its own on the Limiter's store,
// named rls:DOMAIN.override.N_per_M_UNIT, and the descriptor its key; at
// most MaxOverrides exist, past which a new one is InvalidArgument. Such a
// descriptor is decided after the others, outside their all-or-nothing
// take: when they refuse, it is checked without being charged; when it
// refuses after they were charged, their charge stands (as every charge
// stands in envoyproxy/ratelimit).

// MaxOverrides bounds the distinct limit overrides a Service keeps.
const MaxOverrides = 256

type overrides struct {
	mu sync.Mutex
	m  map[string]*leafState
}

// override returns the state of a limit override, creating it on first use.
func (s *Service) override(domain string, o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) (*leafState, error) {
	unitName := strings.ToLower(o.GetUnit().String())
	unit, ok := units[unitName]
	if !ok {
		return nil, fmt.Errorf("limit override: unknown unit %s", o.GetUnit())
	}
	mult := uint32(1)
	if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 0 {
		mult = m.GetValue()
	}
	rpu := o.GetRequestsPerUnit()
	stat := "override." + strconv.FormatUint(uint64(rpu), 10) + "_per_" + strconv.FormatUint(uint64(mult), 10) + "_" + unitName
	id := domain + "\x00" + stat
	s.over.mu.Lock()
	defer s.over.mu.Unlock()
	if ls := s.over.m[id]; ls != nil {
		return ls, nil
	}
	if len(s.over.m) >= MaxOverrides {
		return nil, fmt.Errorf("more than %d distinct limit overrides", MaxOverrides)
	}
	l := &leaf{domain: domain, statKey: stat, rpu: rpu, unit: unit, unitName: unitName, multiplier: mult}
	if time.Duration(mult) > maxPeriod/unit {
		return nil, fmt.Errorf("limit override: a period of %d %ss is too long", mult, unitName)
	}
	l.policy = policyName(domain + "." + stat)
	ls := &leafState{
		l:       l,
		stats:   s.metrics.series(domain, stat),
		limit:   &pb.RateLimitResponse_RateLimit{RequestsPerUnit: rpu, Unit: protoUnit(unitName)},
		nearAt:  int64(math.Floor(float64(rpu) * s.near)),
		ietfPol: policyItem(l),
	}
	if l.limits() {
		lim, err := limiter.New(limiter.Config{Store: s.lim.Store(), Policies: []limiter.Policy{{
			Name: l.policy, Rate: int64(rpu), Period: l.period(), Burst: int64(rpu),
		}}})
		if err != nil {
			return nil, fmt.Errorf("limit override: %w", err)
		}
		if ls.handle, err = lim.Handle(l.policy); err != nil {
			return nil, err
		}
	}
	if s.over.m == nil {
		s.over.m = map[string]*leafState{}
	}
	s.over.m[id] = ls
	return ls, nil
}

// takeLate decides the descriptors with limit overrides, after the others.
func (s *Service) takeLate(ctx context.Context, items []item) error {
	refused := false
	for i := range items {
		it := &items[i]
		if it.ls != nil && !it.late && !it.ls.l.unlimited && !it.ls.l.shadow && !it.ls.l.quota && (it.over || (it.take && !it.dec.Allowed)) {
			refused = true
		}
	}
	for i := range items {
		it := &items[i]
		if !it.late || it.over {
			continue
		}
		cost := it.cost
		if refused {
			cost = 0
		}
		d, err := it.ls.handle.AllowN(ctx, it.key, cost)
		if err != nil {
			return s.storeError(err)
		}
		if err := fallbackError(d); err != nil {
			return err
		}
		it.dec = d
		refused = refused || !d.Allowed
	}
	return nil
}
