package provider

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicerl/sluice/store"
)

// A profile file is YAML, one profile per file:
//
//	schema: 1                      # the file format (SchemaVersion)
//	name: shopify-rest
//	revision: "2026-11-26"         # the profile data's version
//	description: Shopify Admin REST API
//	docs: [https://shopify.dev/docs/api/usage/rate-limits]
//	key: shopify-shop              # exact, lower, host or shopify-shop
//	limits:
//	  - name: requests
//	    scope: shop
//	    unit: requests
//	    algorithm: leaky_bucket    # token_bucket, leaky_bucket, gcra,
//	    capacity: 40               #   fixed_window, sliding_window
//	    rate: 2
//	    per: 1s
//	    sync: {source: shopify-rest}
//	leases:                        # concurrency limits
//	  - name: concurrent-requests
//	    scope: shop
//	    permits: 100
//	    ttl: 1m                    # a permit frees this long after its
//	                               #   holder stopped renewing it
//	    hold: call                 # call: the Runtime holds one around
//	                               #   every call; explicit (default): the
//	                               #   caller, with Profile.LeaseParams
//	outcomes:
//	  throttle: [{status: [429]}]
//
// Decoding is strict: an unknown key, a value of the wrong type or out of
// range is an *Error naming the file, line and field.

// Error is a problem in a profile file.
type Error struct {
	File  string
	Line  int // 1-based; 0 when unknown
	Field string
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("provider: ")
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteByte(':')
	}
	if e.Line > 0 {
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteByte(':')
	}
	if b.Len() > len("provider: ") {
		b.WriteByte(' ')
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// MaxFileSize bounds a profile file (256 KiB).
const MaxFileSize = 256 << 10

type rawProfile struct {
	Schema          int           `yaml:"schema"`
	Name            string        `yaml:"name"`
	Revision        string        `yaml:"revision"`
	Description     string        `yaml:"description"`
	Docs            []string      `yaml:"docs"`
	Key             string        `yaml:"key"`
	ResourceHeader  string        `yaml:"resource_header"`
	DefaultResource string        `yaml:"default_resource"`
	BanDefault      time.Duration `yaml:"ban_default"`
	Limits          []rawLimit    `yaml:"limits"`
	Leases          []rawLease    `yaml:"leases"`
	Routes          []rawRoute    `yaml:"routes"`
	Outcomes        rawOutcomes   `yaml:"outcomes"`
}

type rawLimit struct {
	Name        string        `yaml:"name"`
	Scope       string        `yaml:"scope"`
	Unit        string        `yaml:"unit"`
	Algorithm   string        `yaml:"algorithm"`
	Capacity    int64         `yaml:"capacity"`
	Rate        int64         `yaml:"rate"`
	Per         time.Duration `yaml:"per"`
	Window      time.Duration `yaml:"window"`
	Charge      string        `yaml:"charge"`
	Resource    string        `yaml:"resource"`
	Sync        *rawSync      `yaml:"sync"`
	Description string        `yaml:"description"`
}

type rawSync struct {
	Source string        `yaml:"source"`
	Policy string        `yaml:"policy"`
	Window time.Duration `yaml:"window"`
	Learn  bool          `yaml:"learn"`
}

type rawLease struct {
	Name        string              `yaml:"name"`
	Scope       string              `yaml:"scope"`
	Permits     int64               `yaml:"permits"`
	TTL         time.Duration       `yaml:"ttl"`
	Hold        string              `yaml:"hold"`
	ByVersion   []rawVersionPermits `yaml:"by_api_version"`
	Description string              `yaml:"description"`
}

type rawVersionPermits struct {
	From    string `yaml:"from"`
	Permits int64  `yaml:"permits"`
}

type rawRoute struct {
	Match      string           `yaml:"match"`
	Costs      map[string]int64 `yaml:"costs"`
	Resource   string           `yaml:"resource"`
	Idempotent *bool            `yaml:"idempotent"`
}

type rawOutcomes struct {
	Throttle  []rawRule `yaml:"throttle"`
	Ban       []rawRule `yaml:"ban"`
	Unknown   []rawRule `yaml:"unknown"`
	Permanent []rawRule `yaml:"permanent"`
}

type rawRule struct {
	Status  []int  `yaml:"status"`
	GraphQL string `yaml:"graphql"`
	If      string `yaml:"if"`
}

// LoadFile reads and parses one profile file.
func LoadFile(path string) (*Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("provider: profile file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("provider: profile file %s: %w", path, err)
	}
	return Parse(path, data)
}

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// Parse parses one profile. file names it in errors. The error is an
// *Error (errors.As finds it) for the first problem found.
func Parse(file string, data []byte) (*Profile, error) {
	if len(data) > MaxFileSize {
		return nil, &Error{File: file, Msg: fmt.Sprintf("file is larger than %d bytes", MaxFileSize)}
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, yamlError(file, nil, err)
	}
	if len(root.Content) == 0 {
		return nil, &Error{File: file, Msg: "empty profile file"}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var raw rawProfile
	if err := dec.Decode(&raw); err != nil {
		return nil, yamlError(file, &root, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &Error{File: file, Line: extra.Line, Msg: "a profile file holds one YAML document; found another"}
	}
	v := validator{file: file, root: root.Content[0]}
	p := v.profile(&raw)
	if v.err != nil {
		return nil, v.err
	}
	return p, nil
}

// yamlError turns a decoding error into an *Error with the line (and, when
// the line holds a key, the field) it names.
func yamlError(file string, root *yaml.Node, err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	e := &Error{File: file, Msg: msg}
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Msg = m[2]
		if root != nil {
			e.Field = fieldAtLine(root, "", e.Line)
		}
	}
	return e
}

// fieldAtLine returns the path of the first key or item at line.
func fieldAtLine(n *yaml.Node, path string, line int) string {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if p := fieldAtLine(c, path, line); p != "" {
				return p
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			kp := join(path, k.Value)
			if k.Line == line {
				return kp
			}
			if p := fieldAtLine(v, kp, line); p != "" {
				return p
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			ip := path + "[" + strconv.Itoa(i) + "]"
			if p := fieldAtLine(c, ip, line); p != "" {
				return p
			}
			if c.Line == line {
				return ip
			}
		}
	}
	return ""
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// validator checks a decoded profile, locating its first problem in the
// YAML tree.
type validator struct {
	file string
	root *yaml.Node
	err  *Error
}

// fail records the first problem at field (a path such as
// "limits[1].capacity").
func (v *validator) fail(field, format string, args ...any) {
	if v.err != nil {
		return
	}
	v.err = &Error{File: v.file, Line: lineOf(v.root, field), Field: field, Msg: fmt.Sprintf(format, args...)}
}

// lineOf returns the line of the key (or item) at path, or of its closest
// ancestor that exists.
func lineOf(n *yaml.Node, path string) int {
	line := n.Line
	for _, part := range splitPath(path) {
		switch {
		case n.Kind == yaml.MappingNode && part.key != "":
			found := false
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == part.key {
					line, n, found = n.Content[i].Line, n.Content[i+1], true
					break
				}
			}
			if !found {
				return line
			}
		case n.Kind == yaml.SequenceNode && part.key == "" && part.index < len(n.Content):
			n = n.Content[part.index]
			line = n.Line
		default:
			return line
		}
	}
	return line
}

type pathPart struct {
	key   string
	index int
}

func splitPath(path string) []pathPart {
	var out []pathPart
	for _, seg := range strings.Split(path, ".") {
		if seg == "" {
			continue
		}
		name, rest, _ := strings.Cut(seg, "[")
		if name != "" {
			out = append(out, pathPart{key: name})
		}
		for rest != "" {
			num, after, _ := strings.Cut(rest, "]")
			i, _ := strconv.Atoi(num)
			out = append(out, pathPart{index: i})
			_, rest, _ = strings.Cut(after, "[")
		}
	}
	return out
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)
var versionRE = regexp.MustCompile(`^(\d{4}-(0[1-9]|1[0-2])|unstable)$`)

func (v *validator) name(field, s string) {
	if !nameRE.MatchString(s) {
		v.fail(field, "want 1 to 64 lower-case letters, digits, '_', '-' or '.', starting with a letter or digit; got %q", s)
	}
}

func (v *validator) profile(r *rawProfile) *Profile {
	if r.Schema != SchemaVersion {
		v.fail("schema", "want schema: %d, got %d", SchemaVersion, r.Schema)
	}
	v.name("name", r.Name)
	if r.Revision == "" {
		v.fail("revision", "missing: the profile data's version, such as \"2026-11-26\"")
	}
	p := &Profile{
		Name: r.Name, Revision: r.Revision, Description: r.Description, Docs: r.Docs,
		Key: KeyRule(r.Key), ResourceHeader: r.ResourceHeader, DefaultResource: r.DefaultResource,
		BanDefault: r.BanDefault,
	}
	if p.Key == "" {
		p.Key = KeyExact
	}
	if !slices.Contains(keyRules, p.Key) {
		v.fail("key", "unknown key rule %q (want exact, lower, host or shopify-shop)", r.Key)
	}
	if p.BanDefault < 0 {
		v.fail("ban_default", "must be >= 0, got %s", p.BanDefault)
	}
	if p.BanDefault == 0 {
		p.BanDefault = 2 * time.Minute
	}
	if len(r.Limits) == 0 && len(r.Leases) == 0 {
		v.fail("limits", "a profile needs at least one limit or lease")
	}
	names := map[string]string{}
	routeCosts := map[string]bool{}
	for _, rt := range r.Routes {
		for c := range rt.Costs {
			routeCosts[c] = true
		}
	}
	for i, rl := range r.Limits {
		f := fmt.Sprintf("limits[%d]", i)
		l := v.limit(f, &rl, routeCosts)
		if prev, dup := names[l.Name]; dup {
			v.fail(f+".name", "duplicate name %q (also %s)", l.Name, prev)
		}
		names[l.Name] = f
		p.Limits = append(p.Limits, l)
	}
	for i, rl := range r.Leases {
		f := fmt.Sprintf("leases[%d]", i)
		l := v.lease(f, &rl)
		if prev, dup := names[l.Name]; dup {
			v.fail(f+".name", "duplicate name %q (also %s)", l.Name, prev)
		}
		names[l.Name] = f
		p.Leases = append(p.Leases, l)
	}
	for i, rr := range r.Routes {
		p.Routes = append(p.Routes, v.route(fmt.Sprintf("routes[%d]", i), &rr))
	}
	p.Outcomes.Throttle = v.rules("outcomes.throttle", r.Outcomes.Throttle)
	p.Outcomes.Ban = v.rules("outcomes.ban", r.Outcomes.Ban)
	p.Outcomes.Unknown = v.rules("outcomes.unknown", r.Outcomes.Unknown)
	p.Outcomes.Permanent = v.rules("outcomes.permanent", r.Outcomes.Permanent)
	return p
}

// maxCount bounds capacities, rates and costs: far above any provider's,
// far below what the store's arithmetic could overflow on.
const maxCount = int64(1) << 40

func (v *validator) limit(f string, r *rawLimit, routeCosts map[string]bool) Limit {
	l := Limit{Name: r.Name, Scope: r.Scope, Unit: r.Unit, Algorithm: Algorithm(r.Algorithm),
		Capacity: r.Capacity, Rate: r.Rate, Per: r.Per, Window: r.Window, Charge: r.Charge,
		Resource: r.Resource, Description: r.Description}
	v.name(f+".name", r.Name)
	v.name(f+".scope", r.Scope)
	if l.Unit == "" {
		l.Unit = "requests"
	}
	if l.Charge == "" {
		l.Charge = ChargeRequest
	}
	if !slices.Contains(algorithms, l.Algorithm) {
		v.fail(f+".algorithm", "unknown algorithm %q (want token_bucket, leaky_bucket, gcra, fixed_window or sliding_window)", r.Algorithm)
		return l
	}
	if l.Capacity <= 0 || l.Capacity > maxCount {
		v.fail(f+".capacity", "want a count in [1, 2^40], got %d", l.Capacity)
	}
	if l.Algorithm.windowed() {
		if l.Rate != 0 || l.Per != 0 {
			v.fail(f+".rate", "rate and per apply to buckets; a %s has capacity and window", l.Algorithm)
		}
		if l.Window < time.Millisecond {
			v.fail(f+".window", "want a duration of at least 1ms (such as 10s, 1m, 24h), got %s", l.Window)
		}
	} else {
		if l.Window != 0 {
			v.fail(f+".window", "window applies to windows; a %s has rate and per", l.Algorithm)
		}
		if l.Rate <= 0 || l.Rate > maxCount {
			v.fail(f+".rate", "want a count in [1, 2^40] restored every per, got %d", l.Rate)
		}
		if l.Per < time.Millisecond {
			v.fail(f+".per", "want a duration of at least 1ms (such as 1s, 1m), got %s", l.Per)
		}
	}
	if err := l.StoreLimit(l.Name).Validate(); err != nil && v.err == nil {
		v.fail(f, "%v", err)
	}
	if l.Charge != ChargeRequest && l.Charge != ChargeCost && !routeCosts[l.Charge] {
		v.fail(f+".charge", "want request, cost, or a cost some route lists; got %q", l.Charge)
	}
	if r.Sync != nil {
		s := Sync(*r.Sync)
		if !slices.Contains(SyncSources, s.Source) {
			v.fail(f+".sync.source", "unknown source %q (want one of %s)", s.Source, strings.Join(SyncSources, ", "))
		}
		if s.Window < 0 {
			v.fail(f+".sync.window", "must be >= 0, got %s", s.Window)
		}
		l.Sync = &s
	}
	return l
}

func (v *validator) lease(f string, r *rawLease) Lease {
	l := Lease{Name: r.Name, Scope: r.Scope, Permits: r.Permits, TTL: r.TTL, Hold: Hold(r.Hold), Description: r.Description}
	switch l.Hold {
	case "":
		l.Hold = HoldExplicit
	case HoldExplicit, HoldCall:
	default:
		v.fail(f+".hold", "unknown hold %q (want explicit or call)", r.Hold)
	}
	if l.Hold == HoldCall {
		// The Runtime acquires these itself: the store's bounds apply.
		if l.Permits > store.MaxPermits {
			v.fail(f+".permits", "a lease held around every call has at most %d permits, got %d", store.MaxPermits, l.Permits)
		}
		if l.TTL > store.MaxLeaseTTL || l.TTL%time.Microsecond != 0 {
			v.fail(f+".ttl", "a lease held around every call needs a whole number of microseconds up to %s, got %s", store.MaxLeaseTTL, l.TTL)
		}
		if len(r.ByVersion) > 0 {
			v.fail(f+".by_api_version", "a lease held around every call has one permit count; by_api_version is for explicit leases")
		}
	}
	v.name(f+".name", r.Name)
	v.name(f+".scope", r.Scope)
	if l.Permits <= 0 || l.Permits > 1<<20 {
		v.fail(f+".permits", "want a count in [1, 2^20], got %d", l.Permits)
	}
	if l.TTL < time.Millisecond {
		v.fail(f+".ttl", "want a duration of at least 1ms, got %s", l.TTL)
	}
	prev := ""
	for i, bv := range r.ByVersion {
		bf := fmt.Sprintf("%s.by_api_version[%d]", f, i)
		if !versionRE.MatchString(bv.From) {
			v.fail(bf+".from", "want an API version YYYY-MM or unstable, got %q", bv.From)
		}
		if prev != "" && !versionAtOrAfter(bv.From, prev) || bv.From == prev {
			v.fail(bf+".from", "versions must increase, %q follows %q", bv.From, prev)
		}
		prev = bv.From
		if bv.Permits <= 0 || bv.Permits > 1<<20 {
			v.fail(bf+".permits", "want a count in [1, 2^20], got %d", bv.Permits)
		}
		l.ByVersion = append(l.ByVersion, VersionPermits(bv))
	}
	return l
}

func (v *validator) route(f string, r *rawRoute) Route {
	method, path, ok := strings.Cut(strings.TrimSpace(r.Match), " ")
	path = strings.TrimSpace(path)
	if !ok || method == "" || !strings.HasPrefix(path, "/") || strings.Contains(strings.TrimSuffix(path, "*"), "*") {
		v.fail(f+".match", "want \"METHOD /path\" (a trailing * matches any rest), got %q", r.Match)
	}
	for c, n := range r.Costs {
		if c == ChargeRequest || c == ChargeCost || !nameRE.MatchString(c) {
			v.fail(f+".costs", "bad cost name %q", c)
		}
		if n < 0 || n > maxCount {
			v.fail(f+".costs."+c, "want a cost in [0, 2^40], got %d", n)
		}
	}
	return Route{Method: strings.ToUpper(method), Path: path, Costs: r.Costs, Resource: r.Resource, Idempotent: r.Idempotent}
}

func (v *validator) rules(f string, rs []rawRule) []Rule {
	var out []Rule
	for i, r := range rs {
		rf := fmt.Sprintf("%s[%d]", f, i)
		for _, s := range r.Status {
			if s < 100 || s > 599 {
				v.fail(rf+".status", "want HTTP statuses in [100, 599], got %d", s)
			}
		}
		switch r.GraphQL {
		case "", "THROTTLED", "MAX_COST_EXCEEDED":
		default:
			v.fail(rf+".graphql", "unknown GraphQL code %q (want THROTTLED or MAX_COST_EXCEEDED)", r.GraphQL)
		}
		switch r.If {
		case "", "retry_after", "exhausted":
		default:
			v.fail(rf+".if", "unknown condition %q (want retry_after or exhausted)", r.If)
		}
		if len(r.Status) == 0 && r.GraphQL == "" {
			v.fail(rf, "a rule needs a status or a graphql code")
		}
		out = append(out, Rule(r))
	}
	return out
}
