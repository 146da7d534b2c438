package rls

import (
	"slices"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/sluicerl/sluice/limiter"
)

// Rules are parsed envoyproxy/ratelimit configuration files: domains of
// nested descriptors, some of which carry a rate limit. Build them with
// Parse or LoadFiles. Rules are immutable and safe for concurrent use.
type Rules struct {
	domains map[string]*domain
	order   []*domain // in the order the files defined them
	leaves  []*leaf   // every rate_limit, in tree order
}

type domain struct {
	name string
	file string
	line int
	node *node
}

// node is one descriptor of the configuration tree.
type node struct {
	key, value    string
	line          int
	valueToMetric bool
	share         bool   // share_threshold on a wildcard value
	statPath      string // "key_value.key2": envoyproxy/ratelimit's stat key without the domain
	leaf          *leaf  // its rate_limit, or nil

	exact map[[2]string]*node // children by key and value
	bare  map[string]*node    // children with a key only
	wild  []*node             // children whose value ends in '*', in config order
}

// leaf is one rate_limit of the configuration.
type leaf struct {
	domain     string
	statKey    string // envoyproxy/ratelimit's stat key without the domain
	file       string
	line       int
	rpu        uint32
	unit       time.Duration
	unitName   string
	multiplier uint32
	unlimited  bool
	shadow     bool
	quota      bool
	detailed   bool
	name       string
	replaces   []string
	policy     string // the Sluice policy's name (enforced only when limits())
	idx        int    // position in Rules.leaves
}

// limits reports whether the rate limit needs a Sluice policy: it is
// neither unlimited nor a refusal of everything (requests_per_unit 0).
func (l *leaf) limits() bool { return !l.unlimited && l.rpu > 0 }

// period is the limit's period: its unit times its multiplier.
func (l *leaf) period() time.Duration { return l.unit * time.Duration(l.multiplier) }

func (n *node) find(key, value string) *node {
	if value == "" {
		return n.bare[key]
	}
	return n.exact[[2]string{key, value}]
}

func (n *node) add(c *node, wildcard bool) {
	if c.value == "" {
		if n.bare == nil {
			n.bare = map[string]*node{}
		}
		n.bare[c.key] = c
		return
	}
	if n.exact == nil {
		n.exact = map[[2]string]*node{}
	}
	n.exact[[2]string{c.key, c.value}] = c
	if wildcard {
		n.wild = append(n.wild, c)
	}
}

// walk calls fn on every descriptor below n, in a fixed order (sorted
// keys and values), so that derived names never depend on map order.
func (n *node) walk(fn func(*node)) {
	var kids []*node
	for _, c := range n.exact {
		kids = append(kids, c)
	}
	for _, c := range n.bare {
		kids = append(kids, c)
	}
	slices.SortFunc(kids, func(a, b *node) int {
		return strings.Compare(a.key+"\x00"+a.value, b.key+"\x00"+b.value)
	})
	for _, c := range kids {
		fn(c)
		c.walk(fn)
	}
}

// Domains returns the domain names, sorted.
func (r *Rules) Domains() []string {
	out := make([]string, 0, len(r.domains))
	for name := range r.domains {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// Policies returns the Sluice policies that enforce the rules: one GCRA
// policy per rate_limit that limits (not unlimited, requests_per_unit
// above 0), named as Rules documents, with a rate of requests_per_unit
// per unit (times unit_multiplier) and a burst of requests_per_unit, in
// shadow mode for shadow_mode and quota_mode rules. Give them to the
// limiter.Limiter the Service decides with, beside the HTTP API's own
// policies, so both share their state on any store.
func (r *Rules) Policies() []limiter.Policy {
	var out []limiter.Policy
	for _, l := range r.leaves {
		if !l.limits() {
			continue
		}
		out = append(out, limiter.Policy{
			Name:        l.policy,
			Rate:        int64(l.rpu),
			Period:      l.period(),
			Burst:       int64(l.rpu),
			Shadow:      l.shadow || l.quota,
			Description: "envoy rate limit " + l.domain + "." + l.statKey,
		})
	}
	return out
}

// lookup finds the rate limit of one request descriptor, as
// envoyproxy/ratelimit's GetLimit does: at each level the entry's key and
// value, then the first wildcard whose prefix the value has, then the key
// alone; the limit applies only when the descriptor ends at the level
// that holds it. path receives the node each entry matched (nil past the
// end of the match) and wild whether it matched through a wildcard; both
// must be as long as entries.
func (d *domain) lookup(entries []*ratelimitv3.RateLimitDescriptor_Entry, path []*node, wild []bool) *leaf {
	cur := d.node
	for i, e := range entries {
		next := cur.exact[[2]string{e.Key, e.Value}]
		if next == nil {
			for _, w := range cur.wild {
				if w.key == e.Key && strings.HasPrefix(e.Value, w.value[:len(w.value)-1]) {
					next, wild[i] = w, true
					break
				}
			}
		}
		if next == nil {
			next = cur.bare[e.Key]
		}
		if next == nil {
			return nil
		}
		path[i] = next
		if i == len(entries)-1 {
			return next.leaf
		}
		if len(next.exact) == 0 && len(next.bare) == 0 {
			return nil // the request goes deeper than the configuration
		}
		cur = next
	}
	return nil
}
