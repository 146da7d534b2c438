package yamlconf_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sluicerl/sluice/internal/yamlconf"
)

func walker(errs *[]string) *yamlconf.Walker {
	return &yamlconf.Walker{Errorf: func(n *yaml.Node, path, format string, args ...any) {
		line := 0
		if n != nil {
			line = n.Line
		}
		*errs = append(*errs, fmt.Sprintf("%d %s: %s", line, path, fmt.Sprintf(format, args...)))
	}}
}

func TestPairs(t *testing.T) {
	const doc = "a: &x {k: v}\nb: *x\n0.5: c\na: d\n"
	var n yaml.Node
	require.NoError(t, yaml.Unmarshal([]byte(doc), &n))
	root := yamlconf.Root(&n)

	var errs []string
	w := walker(&errs)
	pairs := w.Pairs(root, "top")
	require.Len(t, pairs, 3, "a, b and 0.5; the second a is a duplicate")
	require.Equal(t, []string{`4 top.a: duplicate key (first at line 1)`}, errs)
	require.Equal(t, yaml.AliasNode, pairs[1][1].Kind, "aliases stay aliases by default")

	errs = nil
	w.Aliases, w.StringKeys = true, true
	pairs = w.Pairs(root, "top")
	require.Len(t, pairs, 2)
	require.Equal(t, yaml.MappingNode, pairs[1][1].Kind, "b reads as the mapping it names")
	require.Equal(t, []string{`3 top: keys must be strings, got "0.5"`, `4 top.a: duplicate key (first at line 1)`}, errs)

	errs = nil
	_, ok := w.Scalar(pairs[0][1], "top.a", "a string")
	require.False(t, ok)
	require.Equal(t, []string{`1 top.a: want a string, got a mapping`}, errs)
	require.Nil(t, w.Pairs(pairs[0][0], "top.a"))
}

func TestScalarAndKind(t *testing.T) {
	var n yaml.Node
	require.NoError(t, yaml.Unmarshal([]byte("a: ~\nb: [1]\nc: x\n"), &n))
	var errs []string
	w := walker(&errs)
	p := w.Pairs(yamlconf.Root(&n), "")
	_, ok := w.Str(p[0][1], yamlconf.Join("", "a"))
	require.False(t, ok)
	_, ok = w.Str(p[1][1], yamlconf.Join("x", "b"))
	require.False(t, ok)
	s, ok := w.Str(p[2][1], "c")
	require.True(t, ok)
	require.Equal(t, "x", s)
	require.Equal(t, []string{"1 a: want a string, got nothing", "2 x.b: want a string, got a list"}, errs)
}

func TestRest(t *testing.T) {
	for _, tt := range []struct{ doc, want string }{
		{"a: 1\n", ""},
		{"a: 1\n---\nb: 2\n", "2 : a test file holds one YAML document; found another"},
		{"a: 1\n---\nb: [\n", "0 : a test file holds one YAML document; found another: "},
	} {
		var errs []string
		w := walker(&errs)
		dec := yaml.NewDecoder(bytes.NewReader([]byte(tt.doc)))
		var n yaml.Node
		require.NoError(t, dec.Decode(&n))
		w.Rest(dec, "test file")
		if tt.want == "" {
			require.Empty(t, errs)
			continue
		}
		require.Len(t, errs, 1)
		require.Contains(t, errs[0], tt.want)
	}
}
