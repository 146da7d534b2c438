package limiter

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicerl/sluice/internal/yamlconf"

	"github.com/sluicerl/sluice/store"
)

// A policy file is YAML with one top-level key, policies, mapping each
// policy name to its settings:
//
//	policies:
//	  binance-weight:          # GCRA: 1200 units per minute, bursts of 100
//	    rate: 1200
//	    period: 1m
//	    burst: 100
//	  orders-10s:              # 50 per 10 s window, aligned to the clock
//	    algorithm: fixed_window
//	    limit: 50
//	    window: 10s
//	  github-hourly:           # envoy-style unit instead of a period
//	    algorithm: sliding_window
//	    limit: 5000
//	    unit: hour
//	    shadow: true
//	  shopify-bulk:            # lease: 5 bulk operations per shop at once
//	    algorithm: concurrency
//	    permits: 5
//	    ttl: 30s
//
// Keys of a policy: algorithm (gcra, fixed_window, sliding_window; default
// gcra); rate or limit (the same number under either name); period or window
// (a Go duration such as 500ms, 10s, 1m, 24h) or unit (second, minute, hour,
// day); burst (gcra only; default rate); shadow (true or false);
// on_store_outage (fail_closed, the default, fail_open or local: what the
// policy does while a shared store is unavailable) and local_share (with
// local: the fraction of the limit this process enforces alone, in (0, 1]);
// description. A lease policy has algorithm: concurrency, permits (how many
// holders per key at once) and ttl (a duration), and none of the rate keys. Decoding is strict: an unknown key, a duplicate key or a bad
// value is an error naming the file, line, key and what was wrong.

// ConfigError is a problem in a policy file, located by line and column.
type ConfigError struct {
	File   string // file name, or "" for data without one
	Line   int    // 1-based; 0 if unknown
	Column int
	Path   string // dotted key path, e.g. "policies.api.rate"
	Msg    string
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteByte(':')
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, "%d:%d: ", e.Line, e.Column)
	} else if e.File != "" {
		b.WriteByte(' ')
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ConfigErrors is every problem found in a policy file. Its Error lists
// them one per line.
type ConfigErrors []*ConfigError

func (es ConfigErrors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// Unwrap lets errors.As find each *ConfigError.
func (es ConfigErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// maxConfigSize bounds a policy file (1 MiB).
const maxConfigSize = 1 << 20

// LoadFile reads and parses a policy file.
func LoadFile(path string) ([]Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("limiter: policy file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("limiter: policy file %s: %w", path, err)
	}
	return Parse(path, data)
}

// Parse parses policy YAML. name is used in error messages. Every problem
// found is reported (as ConfigErrors), not only the first.
func Parse(name string, data []byte) ([]Policy, error) {
	if len(data) > maxConfigSize {
		return nil, ConfigErrors{{File: name, Msg: fmt.Sprintf("file is larger than %d bytes", maxConfigSize)}}
	}
	p := parser{file: name}
	p.Errorf = p.errAt
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, ConfigErrors{{File: name, Msg: "empty policy file: want a top-level 'policies' mapping"}}
		}
		return nil, ConfigErrors{{File: name, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	p.Rest(dec, "policy file")
	policies := p.top(yamlconf.Root(&doc))
	if len(p.errs) > 0 {
		slices.SortStableFunc(p.errs, func(a, b *ConfigError) int {
			return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
		})
		return nil, p.errs
	}
	return policies, nil
}

type parser struct {
	yamlconf.Walker // refuses aliases, takes any scalar as a key
	file            string
	errs            ConfigErrors
}

func (p *parser) errAt(n *yaml.Node, path, format string, args ...any) {
	e := &ConfigError{File: p.file, Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	p.errs = append(p.errs, e)
}

func (p *parser) top(n *yaml.Node) []Policy {
	var policies []Policy
	found := false
	for _, kv := range p.Pairs(n, "") {
		k, v := kv[0], kv[1]
		switch k.Value {
		case "policies":
			found = true
			if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
				continue // an empty list of policies is allowed
			}
			for _, pv := range p.Pairs(v, "policies") {
				if pol, ok := p.policy(pv[0], pv[1]); ok {
					policies = append(policies, pol)
				}
			}
		case "auth":
			// Tokens: package auth reads this section (auth.ParseConfig).
		default:
			p.errAt(k, k.Value, "unknown top-level key (want 'policies' or 'auth')")
		}
	}
	if !found && len(p.errs) == 0 {
		p.errAt(n, "", "no 'policies' key")
	}
	return policies
}

func (p *parser) policy(name, n *yaml.Node) (Policy, bool) {
	path := yamlconf.Join("policies", name.Value)
	pol := Policy{Name: name.Value}
	before := len(p.errs)
	if err := validName(name.Value); err != nil {
		p.errAt(name, path, "%v", err)
	}
	var rateKey, periodKey *yaml.Node
	var burstKey, shareKey *yaml.Node
	var permitsKey, ttlKey *yaml.Node
	for _, kv := range p.Pairs(n, path) {
		k, v := kv[0], kv[1]
		kp := yamlconf.Join(path, k.Value)
		switch k.Value {
		case "algorithm":
			if s, ok := p.Str(v, kp); ok {
				a, err := store.ParseAlgorithm(s)
				if s == "concurrency" {
					a, err = store.Concurrency, nil
				}
				if err != nil || s == "" {
					p.errAt(v, kp, "unknown algorithm %q (want gcra, fixed_window, sliding_window or concurrency)", s)
				}
				pol.Algorithm = a
			}
		case "rate", "limit":
			if rateKey != nil {
				p.errAt(k, kp, "give either rate or limit, not both (other at line %d)", rateKey.Line)
				continue
			}
			rateKey = k
			pol.Rate, _ = p.positive(v, kp)
		case "period", "window", "unit":
			if periodKey != nil {
				p.errAt(k, kp, "give one of period, window or unit (%s at line %d)", periodKey.Value, periodKey.Line)
				continue
			}
			periodKey = k
			if k.Value == "unit" {
				pol.Period, _ = p.unit(v, kp)
			} else {
				pol.Period, _ = p.duration(v, kp)
			}
		case "burst":
			burstKey = k
			pol.Burst, _ = p.positive(v, kp)
		case "shadow":
			pol.Shadow, _ = p.boolean(v, kp)
		case "on_store_outage":
			if s, ok := p.Str(v, kp); ok {
				m, err := store.ParseOutageMode(s)
				if err != nil {
					p.errAt(v, kp, "want fail_closed, fail_open or local, got %q", s)
				}
				pol.Outage.Mode = m
			}
		case "local_share":
			shareKey = k
			pol.Outage.Share, _ = p.fraction(v, kp)
		case "description":
			pol.Description, _ = p.Str(v, kp)
		case "permits":
			permitsKey = k
			pol.Permits, _ = p.positive(v, kp)
		case "ttl":
			ttlKey = k
			pol.TTL, _ = p.duration(v, kp)
		default:
			p.errAt(k, kp, "unknown key (want algorithm, rate, limit, period, window, unit, burst, shadow, on_store_outage, local_share, permits, ttl or description)")
		}
	}
	if n.Kind != yaml.MappingNode {
		return pol, false
	}
	if pol.Algorithm == store.Concurrency {
		for _, k := range []*yaml.Node{rateKey, periodKey, burstKey} {
			if k != nil {
				p.errAt(k, yamlconf.Join(path, k.Value), "%s does not apply to concurrency (want permits and ttl)", k.Value)
			}
		}
		if permitsKey == nil {
			p.errAt(name, path, "missing permits")
		}
		if ttlKey == nil {
			p.errAt(name, path, "missing ttl")
		}
		rateKey, periodKey, burstKey = name, name, nil
	} else {
		for _, k := range []*yaml.Node{permitsKey, ttlKey} {
			if k != nil {
				p.errAt(k, yamlconf.Join(path, k.Value), "%s applies only to algorithm: concurrency", k.Value)
			}
		}
	}
	if rateKey == nil {
		p.errAt(name, path, "missing rate (or limit)")
	}
	if periodKey == nil {
		p.errAt(name, path, "missing period (or window, or unit)")
	}
	if shareKey != nil && pol.Outage.Mode != store.FailLocal {
		p.errAt(shareKey, yamlconf.Join(path, "local_share"), "local_share applies only with on_store_outage: local")
	}
	if burstKey != nil && pol.Algorithm != store.GCRA {
		p.errAt(burstKey, yamlconf.Join(path, "burst"), "burst applies only to gcra, not %s", pol.Algorithm)
	}
	if len(p.errs) > before {
		return pol, false
	}
	if err := pol.Validate(); err != nil {
		msg := strings.TrimPrefix(err.Error(), ErrInvalidPolicy.Error()+": ")
		p.errAt(name, path, "%s", msg)
		return pol, false
	}
	return pol, true
}

func (p *parser) positive(v *yaml.Node, path string) (int64, bool) {
	s, ok := p.Scalar(v, path, "a positive integer")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64)
	if err != nil || n <= 0 || v.Tag != "!!int" {
		p.errAt(v, path, "want a positive integer, got %q", s)
		return 0, false
	}
	return n, true
}

func (p *parser) fraction(v *yaml.Node, path string) (float64, bool) {
	s, ok := p.Scalar(v, path, "a number in (0, 1]")
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || !(f > 0 && f <= 1) {
		p.errAt(v, path, "want a number in (0, 1], got %q", s)
		return 0, false
	}
	return f, true
}

func (p *parser) duration(v *yaml.Node, path string) (time.Duration, bool) {
	s, ok := p.Scalar(v, path, "a duration such as 1s, 10s, 1m or 24h")
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		p.errAt(v, path, "want a positive duration such as 1s, 10s, 1m or 24h, got %q", s)
		return 0, false
	}
	return d, true
}

var units = map[string]time.Duration{
	"second": time.Second, "minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour,
}

func (p *parser) unit(v *yaml.Node, path string) (time.Duration, bool) {
	s, ok := p.Scalar(v, path, "second, minute, hour or day")
	if !ok {
		return 0, false
	}
	d, ok := units[strings.ToLower(s)]
	if !ok {
		p.errAt(v, path, "want second, minute, hour or day, got %q", s)
	}
	return d, ok
}

func (p *parser) boolean(v *yaml.Node, path string) (bool, bool) {
	s, ok := p.Scalar(v, path, "true or false")
	if !ok {
		return false, false
	}
	switch s {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	p.errAt(v, path, "want true or false, got %q", s)
	return false, false
}
