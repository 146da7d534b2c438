package rls

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicerl/sluice/internal/yamlconf"
	"github.com/sluicerl/sluice/limiter"
)

// An envoyproxy/ratelimit configuration file, read unchanged:
//
//	domain: edge_proxy_per_ip
//	descriptors:
//	  - key: remote_address          # any value: one limit per address
//	    rate_limit:
//	      unit: second               # second, minute, hour, day, week, month, year
//	      requests_per_unit: 10
//	  - key: remote_address          # a value is matched before the bare key
//	    value: 50.0.0.5
//	    rate_limit: {unit: second, requests_per_unit: 0}   # 0 refuses every request
//	  - key: path
//	    value: /api/*                # a trailing * matches every value with that prefix
//	    share_threshold: true        # ...and all of them share one limit
//	    rate_limit: {unit: minute, requests_per_unit: 100, name: api}
//	    shadow_mode: true            # counted, never refused
//	    detailed_metric: true        # metrics per request value (bounded: Config.MaxDetailedSeries)
//
// Keys of a descriptor: key (required), value, rate_limit, descriptors
// (nested, matched against the next entry of a request's descriptor),
// shadow_mode, quota_mode, detailed_metric, value_to_metric,
// share_threshold. Keys of rate_limit: unit, requests_per_unit, unlimited,
// name, replaces (a list of {name: ...}: when a request matches both, the
// named limits are not applied), and unit_multiplier (a Sluice extension:
// the period is unit_multiplier units). Booleans take YAML 1.1's spellings
// as envoyproxy/ratelimit's YAML library does (true, yes, on, ...).
//
// Differences from envoyproxy/ratelimit's loader, all of them refusals of a
// config that would not do what it says: an unknown key is an error where
// it stands (envoyproxy/ratelimit accepts any key it knows anywhere, so a
// unit misplaced outside rate_limit is silently ignored there); a rate_limit
// without requests_per_unit is an error (there it means 0, refusing every
// request); a domain defined in two files is an error as there (unless its
// MERGE_DOMAIN_CONFIG is set, which Sluice does not offer); a wildcard
// matches values of the same key only (there "a_*" also matched key "a_b").

// maxPeriod bounds a rule's period (unit times unit_multiplier).
const maxPeriod = time.Duration(1 << 62)

// maxFileSize bounds one configuration file (1 MiB).
const maxFileSize = 1 << 20

// File is one configuration file's contents; Name is used in errors.
type File struct {
	Name string
	Data []byte
}

// LoadFiles reads and parses configuration files. A path naming a
// directory loads every *.yaml and *.yml file in it (not its
// subdirectories), in name order, as envoyproxy/ratelimit loads its runtime
// directory.
func LoadFiles(paths ...string) (*Rules, error) {
	var files []File
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("rls: config: %w", err)
		}
		names := []string{p}
		if st.IsDir() {
			names = nil
			entries, err := os.ReadDir(p)
			if err != nil {
				return nil, fmt.Errorf("rls: config: %w", err)
			}
			for _, e := range entries {
				ext := filepath.Ext(e.Name())
				if !e.IsDir() && (ext == ".yaml" || ext == ".yml") {
					names = append(names, filepath.Join(p, e.Name()))
				}
			}
			if len(names) == 0 {
				return nil, fmt.Errorf("rls: config: directory %s holds no .yaml or .yml file", p)
			}
		}
		for _, name := range names {
			data, err := readFile(name)
			if err != nil {
				return nil, err
			}
			files = append(files, File{Name: name, Data: data})
		}
	}
	return Parse(files...)
}

func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("rls: config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("rls: config %s: %w", name, err)
	}
	return data, nil
}

// Parse parses configuration files into Rules. Every problem found is
// reported, as limiter.ConfigErrors whose entries name the file, line,
// column and key path.
func Parse(files ...File) (*Rules, error) {
	if len(files) == 0 {
		return nil, errors.New("rls: config: no configuration file")
	}
	r := &Rules{domains: map[string]*domain{}}
	var errs limiter.ConfigErrors
	for _, f := range files {
		p := parser{Walker: yamlconf.Walker{Aliases: true, StringKeys: true}, file: f.Name, rules: r}
		p.Errorf = p.errAt
		p.parse(f.Data)
		errs = append(errs, p.errs...)
	}
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b *limiter.ConfigError) int {
			return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
		})
		return nil, errs
	}
	if err := r.name(); err != nil {
		return nil, err
	}
	return r, nil
}

// Units are envoyproxy/ratelimit's, with its lengths (a month is 30 days,
// a year 365).
var units = map[string]time.Duration{
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
	"day":    24 * time.Hour,
	"week":   7 * 24 * time.Hour,
	"month":  30 * 24 * time.Hour,
	"year":   365 * 24 * time.Hour,
}

type parser struct {
	yamlconf.Walker // follows aliases, wants string keys, as yaml.v2 reads
	file            string
	rules           *Rules
	errs            limiter.ConfigErrors
}

func (p *parser) errAt(n *yaml.Node, path, format string, args ...any) {
	e := &limiter.ConfigError{File: p.file, Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	p.errs = append(p.errs, e)
}

func (p *parser) parse(data []byte) {
	if len(data) > maxFileSize {
		p.errAt(nil, "", "file is larger than %d bytes", maxFileSize)
		return
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errAt(nil, "", "empty file: want a mapping with domain and descriptors")
			return
		}
		p.syntaxError(err)
		return
	}
	p.Rest(dec, "configuration file")
	root := yamlconf.Deref(yamlconf.Root(&doc))
	var domainNode, descNode, domainKey *yaml.Node
	for _, kv := range p.Pairs(root, "") {
		switch k, v := kv[0], kv[1]; k.Value {
		case "domain":
			domainKey, domainNode = k, v
		case "descriptors":
			descNode = v
		default:
			p.errAt(k, k.Value, "unknown key (want domain or descriptors)")
		}
	}
	if root.Kind != yaml.MappingNode {
		return
	}
	name := ""
	if domainNode == nil {
		p.errAt(root, "", "missing domain")
	} else if s, ok := p.Str(domainNode, "domain"); ok {
		if s == "" {
			p.errAt(domainNode, "domain", "empty domain")
		}
		name = s
	}
	d := &domain{name: name, file: p.file, node: &node{}}
	if domainKey != nil {
		d.line = domainKey.Line
	}
	if descNode != nil {
		p.descriptors(d, d.node, descNode, "descriptors", name)
	}
	if name == "" {
		return
	}
	if prev, dup := p.rules.domains[name]; dup {
		p.errAt(domainKey, "domain", "domain %q is already defined at %s:%d", name, prev.file, prev.line)
		return
	}
	p.rules.domains[name] = d
	p.rules.order = append(p.rules.order, d)
}

// syntaxError reports a YAML syntax error, at its line when the YAML
// library names one ("yaml: line 3: did not find expected ','").
func (p *parser) syntaxError(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	e := &limiter.ConfigError{File: p.file, Msg: msg}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, tail, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil && n > 0 {
				e.Line, e.Msg = n, "invalid YAML: "+tail
			}
		}
	}
	p.errs = append(p.errs, e)
}

func (p *parser) descriptors(d *domain, parent *node, n *yaml.Node, path, statPrefix string) {
	if yamlconf.IsNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		p.errAt(n, path, "want a list of descriptors, got %s", yamlconf.Kind(n))
		return
	}
	for i, item := range n.Content {
		p.descriptor(d, parent, yamlconf.Deref(item), fmt.Sprintf("%s[%d]", path, i), statPrefix)
	}
}

func (p *parser) descriptor(d *domain, parent *node, n *yaml.Node, path, statPrefix string) {
	if n.Kind != yaml.MappingNode {
		p.errAt(n, path, "want a descriptor (a mapping with key, value, rate_limit, descriptors...), got %s", yamlconf.Kind(n))
		return
	}
	var keyNode, valueNode, rlNode, subNode *yaml.Node
	var flags struct{ shadow, quota, detailed, valueToMetric, share bool }
	var shareNode *yaml.Node
	for _, kv := range p.Pairs(n, path) {
		k, v := kv[0], kv[1]
		kp := yamlconf.Join(path, k.Value)
		switch k.Value {
		case "key":
			keyNode = v
		case "value":
			valueNode = v
		case "rate_limit":
			rlNode = v
		case "descriptors":
			subNode = v
		case "shadow_mode":
			flags.shadow, _ = p.boolean(v, kp)
		case "quota_mode":
			flags.quota, _ = p.boolean(v, kp)
		case "detailed_metric":
			flags.detailed, _ = p.boolean(v, kp)
		case "value_to_metric":
			flags.valueToMetric, _ = p.boolean(v, kp)
		case "share_threshold":
			shareNode = k
			flags.share, _ = p.boolean(v, kp)
		default:
			hint := ""
			if _, ok := rateLimitKeys[k.Value]; ok {
				hint = " (it belongs inside rate_limit)"
			}
			p.errAt(k, kp, "unknown key%s (want key, value, rate_limit, descriptors, shadow_mode, quota_mode, detailed_metric, value_to_metric or share_threshold)", hint)
		}
	}
	var key, value string
	if keyNode == nil {
		p.errAt(n, path, "descriptor has no key")
		return
	}
	key, ok := p.Str(keyNode, yamlconf.Join(path, "key"))
	if !ok {
		return
	}
	if key == "" {
		p.errAt(keyNode, yamlconf.Join(path, "key"), "descriptor has an empty key")
		return
	}
	if valueNode != nil && !yamlconf.IsNull(valueNode) {
		if value, ok = p.Str(valueNode, yamlconf.Join(path, "value")); !ok {
			return
		}
	}
	wildcard := strings.HasSuffix(value, "*")
	if flags.share && !wildcard {
		p.errAt(shareNode, yamlconf.Join(path, "share_threshold"), "share_threshold applies only to a wildcard value (one ending with '*'), not %q", value)
	}
	statKey := key
	if value != "" {
		statKey += "_" + value
	}
	full := statPrefix + "." + statKey
	child := &node{
		key: key, value: value, line: n.Line, valueToMetric: flags.valueToMetric, share: flags.share && wildcard,
		statPath: strings.TrimPrefix(strings.TrimPrefix(full, d.name), "."),
	}
	if prev := parent.find(key, value); prev != nil {
		p.errAt(keyNode, yamlconf.Join(path, "key"), "duplicate descriptor %q (first at line %d)", full, prev.line)
		return
	}
	parent.add(child, wildcard)
	if rlNode != nil {
		child.leaf = p.rateLimit(d, rlNode, yamlconf.Join(path, "rate_limit"), child)
		if child.leaf != nil {
			child.leaf.shadow = flags.shadow
			child.leaf.quota = flags.quota
			child.leaf.detailed = flags.detailed
		}
	}
	if subNode != nil {
		p.descriptors(d, child, subNode, yamlconf.Join(path, "descriptors"), full)
	}
}

var rateLimitKeys = map[string]struct{}{
	"unit": {}, "requests_per_unit": {}, "unlimited": {}, "name": {}, "replaces": {}, "unit_multiplier": {},
}

func (p *parser) rateLimit(d *domain, n *yaml.Node, path string, at *node) *leaf {
	l := &leaf{domain: d.name, statKey: at.statPath, file: p.file, line: n.Line, multiplier: 1}
	before := len(p.errs)
	var unitNode, unitKey, rpuKey *yaml.Node
	for _, kv := range p.Pairs(n, path) {
		k, v := kv[0], kv[1]
		kp := yamlconf.Join(path, k.Value)
		switch k.Value {
		case "unit":
			unitKey, unitNode = k, v
		case "requests_per_unit":
			rpuKey = k
			if s, ok := p.Scalar(v, kp, "a whole number from 0 to 4294967295"); ok {
				x, err := strconv.ParseUint(s, 10, 32)
				if err != nil || v.ShortTag() != "!!int" {
					p.errAt(v, kp, "want a whole number from 0 to 4294967295, got %q", s)
				}
				l.rpu = uint32(x)
			}
		case "unit_multiplier":
			if s, ok := p.Scalar(v, kp, "a positive whole number"); ok {
				x, err := strconv.ParseUint(s, 10, 32)
				if err != nil || x == 0 || v.ShortTag() != "!!int" {
					p.errAt(v, kp, "want a positive whole number, got %q", s)
				}
				l.multiplier = uint32(x)
			}
		case "unlimited":
			l.unlimited, _ = p.boolean(v, kp)
		case "name":
			if !yamlconf.IsNull(v) {
				l.name, _ = p.Str(v, kp)
			}
		case "replaces":
			p.replaces(l, v, kp)
		default:
			p.errAt(k, kp, "unknown key (want unit, requests_per_unit, unlimited, name, replaces or unit_multiplier)")
		}
	}
	if n.Kind != yaml.MappingNode {
		return nil
	}
	if unitNode != nil {
		if s, ok := p.Str(unitNode, yamlconf.Join(path, "unit")); ok {
			u, known := units[strings.ToLower(s)]
			switch {
			case l.unlimited:
				p.errAt(unitKey, yamlconf.Join(path, "unit"), "an unlimited rate limit takes no unit")
			case !known:
				p.errAt(unitNode, yamlconf.Join(path, "unit"), "invalid rate limit unit %q (want second, minute, hour, day, week, month or year)", s)
			default:
				l.unit, l.unitName = u, strings.ToLower(s)
			}
		}
	} else if !l.unlimited {
		p.errAt(n, path, "missing unit (want second, minute, hour, day, week, month or year, or unlimited: true)")
	}
	if rpuKey == nil && !l.unlimited {
		p.errAt(n, path, "missing requests_per_unit (write requests_per_unit: 0 to refuse every request)")
	}
	for i, r := range l.replaces {
		if r == l.name && l.name != "" {
			p.errAt(n, yamlconf.Join(path, fmt.Sprintf("replaces[%d]", i)), "a rate limit cannot replace itself (%q)", r)
		}
	}
	if time.Duration(l.multiplier) > maxPeriod/max(l.unit, 1) {
		p.errAt(n, yamlconf.Join(path, "unit_multiplier"), "the period (%d %ss) is too long", l.multiplier, l.unitName)
	}
	if len(p.errs) > before {
		return nil
	}
	if l.limits() {
		pol := limiter.Policy{Name: "rls:check", Rate: int64(l.rpu), Period: l.period(), Burst: int64(l.rpu)}
		if err := pol.Validate(); err != nil {
			msg := err.Error()
			if i := strings.LastIndex(msg, ": "); i >= 0 {
				msg = msg[i+2:]
			}
			p.errAt(rpuKey, yamlconf.Join(path, "requests_per_unit"), "%d per %s cannot be enforced: %s", l.rpu, l.period(), msg)
			return nil
		}
	}
	return l
}

func (p *parser) replaces(l *leaf, v *yaml.Node, path string) {
	if yamlconf.IsNull(v) {
		return
	}
	if v.Kind != yaml.SequenceNode {
		p.errAt(v, path, "want a list of {name: ...}, got %s", yamlconf.Kind(v))
		return
	}
	for i, item := range v.Content {
		ip := fmt.Sprintf("%s[%d]", path, i)
		name := ""
		for _, kv := range p.Pairs(item, ip) {
			k, val := kv[0], kv[1]
			if k.Value != "name" {
				p.errAt(k, yamlconf.Join(ip, k.Value), "unknown key (want name)")
				continue
			}
			if !yamlconf.IsNull(val) {
				name, _ = p.Str(val, yamlconf.Join(ip, "name"))
			}
		}
		if yamlconf.Deref(item).Kind != yaml.MappingNode {
			continue
		}
		if name == "" {
			p.errAt(item, ip, "empty replaces entry: want name: the name of the rate limit to replace")
			continue
		}
		l.replaces = append(l.replaces, name)
	}
}

// boolean accepts YAML 1.1's booleans, which envoyproxy/ratelimit's YAML
// library (yaml.v2) reads.
func (p *parser) boolean(v *yaml.Node, path string) (bool, bool) {
	s, ok := p.Scalar(v, path, "true or false")
	if !ok {
		return false, false
	}
	switch s {
	case "true", "True", "TRUE", "yes", "Yes", "YES", "y", "Y", "on", "On", "ON":
		return true, true
	case "false", "False", "FALSE", "no", "No", "NO", "n", "N", "off", "Off", "OFF":
		return false, true
	}
	p.errAt(v, path, "want true or false, got %q", s)
	return false, false
}

// name gives every enforced leaf its Sluice policy name: "rls:" followed
// by the domain and the descriptor path, as envoyproxy/ratelimit names
// its stats ("rls:mongo_cps.database_users"). A character a policy name
// cannot hold becomes '_', and a name so changed, or longer than 128
// bytes, ends in a hash of the original so that two rules never share a
// name. Names depend on the configuration's text only, so state kept in a
// shared store survives restarts and reorderings.
func (r *Rules) name() error {
	seen := map[string]*leaf{}
	for _, d := range r.order {
		var errs limiter.ConfigErrors
		d.node.walk(func(n *node) {
			l := n.leaf
			if l == nil {
				return
			}
			l.idx = len(r.leaves)
			r.leaves = append(r.leaves, l)
			l.policy = policyName(d.name + "." + l.statKey)
			if prev := seen[l.policy]; prev != nil {
				errs = append(errs, &limiter.ConfigError{File: l.file, Line: l.line, Msg: fmt.Sprintf(
					"rate limit %q has the same Sluice policy name %q as the one at %s:%d", d.name+"."+l.statKey, l.policy, prev.file, prev.line)})
			}
			seen[l.policy] = l
		})
		if len(errs) > 0 {
			return errs
		}
	}
	return nil
}

// PolicyPrefix starts the name of every policy the rules define.
const PolicyPrefix = "rls:"

const maxPolicyName = 128

func policyName(full string) string {
	var b strings.Builder
	b.WriteString(PolicyPrefix)
	changed := false
	for i := 0; i < len(full); i++ {
		c := full[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == ':' || c == '/' {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
			changed = true
		}
	}
	name := b.String()
	if !changed && len(name) <= maxPolicyName {
		return name
	}
	sum := sha256.Sum256([]byte(full))
	suffix := "-" + hex.EncodeToString(sum[:8])
	if len(name) > maxPolicyName-len(suffix) {
		name = name[:maxPolicyName-len(suffix)]
	}
	return name + suffix
}
