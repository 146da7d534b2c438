// Package yamlconf holds what the YAML configuration readers share
// (package limiter's policy files, package rls's envoyproxy/ratelimit
// files): walking yaml.v3 nodes and reading scalars, with errors that name
// the path and the node's line through the reader's own Errorf.
package yamlconf

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Walker reads mappings and scalars, reporting what is wrong through
// Errorf. Its zero options refuse aliases (an alias is a node of its own
// kind) and accept any scalar as a mapping key.
type Walker struct {
	// Errorf reports a problem at node n (nil: no position) and path.
	Errorf func(n *yaml.Node, path, format string, args ...any)
	// Aliases makes Pairs follow aliases: a mapping or value that is an
	// alias reads as the node it names.
	Aliases bool
	// StringKeys refuses mapping keys that are not strings (!!str), such
	// as 0.25 or true; otherwise any scalar is a key.
	StringKeys bool
}

// Pairs returns the key/value pairs of a mapping node, reporting a node
// that is not a mapping, and duplicate and non-string keys.
func (w *Walker) Pairs(n *yaml.Node, path string) [][2]*yaml.Node {
	if w.Aliases {
		n = Deref(n)
	}
	if n.Kind != yaml.MappingNode {
		w.Errorf(n, path, "want a mapping, got %s", Kind(n))
		return nil
	}
	seen := map[string]int{}
	var out [][2]*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if w.Aliases {
			v = Deref(v)
		}
		if k.Kind != yaml.ScalarNode || w.StringKeys && k.ShortTag() != "!!str" {
			w.Errorf(k, path, "keys must be strings, got %s", Kind(k))
			continue
		}
		if line, dup := seen[k.Value]; dup {
			w.Errorf(k, Join(path, k.Value), "duplicate key (first at line %d)", line)
			continue
		}
		seen[k.Value] = k.Line
		out = append(out, [2]*yaml.Node{k, v})
	}
	return out
}

// Scalar returns the text of a scalar that is not null, or reports
// "want <want>, got ..." and false.
func (w *Walker) Scalar(v *yaml.Node, path, want string) (string, bool) {
	if v.Kind != yaml.ScalarNode || IsNull(v) {
		w.Errorf(v, path, "want %s, got %s", want, Kind(v))
		return "", false
	}
	return v.Value, true
}

// Str is Scalar wanting a string.
func (w *Walker) Str(v *yaml.Node, path string) (string, bool) {
	return w.Scalar(v, path, "a string")
}

// Rest reports through Errorf a document that dec holds after the one
// decoded, even one that does not parse: a file (a "policy file") holds
// one YAML document.
func (w *Walker) Rest(dec *yaml.Decoder, file string) {
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		w.Errorf(&extra, "", "a %s holds one YAML document; found another", file)
	} else if !errors.Is(err, io.EOF) {
		w.Errorf(nil, "", "a %s holds one YAML document; found another: %s", file, strings.TrimPrefix(err.Error(), "yaml: "))
	}
}

// Root returns the top node of a decoded document.
func Root(doc *yaml.Node) *yaml.Node {
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		return doc.Content[0]
	}
	return doc
}

// Deref follows an alias to the node it names.
func Deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// IsNull reports whether n is a null scalar (~, null, or nothing).
func IsNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// Kind describes n for an error message: "a mapping", "a list", "an
// alias", "nothing", or a scalar's text quoted.
func Kind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if IsNull(n) {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "a document"
}

// Join appends key to a dotted path.
func Join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
