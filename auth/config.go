package auth

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ParseConfig reads the "auth" section of a policy file (other top-level
// keys are the limiter's and are ignored here):
//
//	auth:
//	  tokens:
//	    - name: ci-worker
//	      scopes: [take, lease]   # or "take,lease", or "*"
//	      sha256: 5d41402a...
//
// found is false when the file has no "auth" key. name is used in errors,
// which give the line.
func ParseConfig(name string, data []byte) (t *Tokens, found bool, err error) {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("auth: %s: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, false, nil // the limiter's parser reports it
	}
	var sec *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "auth" {
			sec = root.Content[i+1]
		}
	}
	if sec == nil {
		return nil, false, nil
	}
	at := func(n *yaml.Node, format string, args ...any) error {
		return fmt.Errorf("auth: %s:%d:%d: %s", name, n.Line, n.Column, fmt.Sprintf(format, args...))
	}
	if sec.Kind != yaml.MappingNode {
		return nil, true, at(sec, "auth: want a mapping with a 'tokens' list")
	}
	var list *yaml.Node
	for i := 0; i+1 < len(sec.Content); i += 2 {
		k := sec.Content[i]
		if k.Value != "tokens" {
			return nil, true, at(k, "auth.%s: unknown key (want 'tokens')", truncate(k.Value, 32))
		}
		list = sec.Content[i+1]
	}
	if list == nil || list.Tag == "!!null" {
		return &Tokens{}, true, nil
	}
	if list.Kind != yaml.SequenceNode {
		return nil, true, at(list, "auth.tokens: want a list of {name, scopes, sha256}")
	}
	specs := make([]Spec, 0, len(list.Content))
	for i, item := range list.Content {
		path := fmt.Sprintf("auth.tokens[%d]", i)
		if item.Kind != yaml.MappingNode {
			return nil, true, at(item, "%s: want a mapping {name, scopes, sha256}", path)
		}
		var spec Spec
		var have [3]bool
		for j := 0; j+1 < len(item.Content); j += 2 {
			k, v := item.Content[j], item.Content[j+1]
			switch k.Value {
			case "name", "sha256":
				if v.Kind != yaml.ScalarNode {
					return nil, true, at(v, "%s.%s: want a string", path, k.Value)
				}
				if k.Value == "name" {
					spec.Name, have[0] = v.Value, true
				} else {
					spec.SHA256, have[2] = v.Value, true
				}
			case "scopes":
				s, err := yamlScopes(v)
				if err != nil {
					return nil, true, at(v, "%s.scopes: %s", path, strings.TrimPrefix(err.Error(), "auth: "))
				}
				spec.Scopes, have[1] = s, true
			default:
				return nil, true, at(k, "%s.%s: unknown key (want name, scopes, sha256)", path, truncate(k.Value, 32))
			}
		}
		for f, field := range []string{"name", "scopes", "sha256"} {
			if !have[f] {
				return nil, true, at(item, "%s: %s is required", path, field)
			}
		}
		if _, err := spec.entry(); err != nil {
			return nil, true, at(item, "%s: %s", path, strings.TrimPrefix(err.Error(), "auth: "))
		}
		specs = append(specs, spec)
	}
	t, err = New(specs)
	if err != nil {
		return nil, true, at(list, "auth.tokens: %s", strings.TrimPrefix(err.Error(), "auth: "))
	}
	return t, true, nil
}

// yamlScopes reads scopes as a list of names or one comma-separated string.
func yamlScopes(v *yaml.Node) (Scope, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		return ParseScopes(v.Value)
	case yaml.SequenceNode:
		if len(v.Content) == 0 {
			return 0, errors.New("must not be empty")
		}
		var out Scope
		for _, n := range v.Content {
			if n.Kind != yaml.ScalarNode {
				return 0, errors.New("want scope names")
			}
			s, err := parseScope(n.Value)
			if err != nil {
				return 0, err
			}
			out |= s
		}
		return out, nil
	}
	return 0, errors.New("want a list of scope names or a string such as \"take,lease\"")
}
