package rls

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/limiter"
)

// Every configuration envoyproxy/ratelimit ships as valid (examples, tests,
// integration tests, README) loads, each on its own.
func TestEnvoyConfigsLoad(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/envoy/*.yaml")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 25)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			r, err := LoadFiles(f)
			require.NoError(t, err)
			require.Len(t, r.Domains(), 1)
			lim, err := limiter.New(limiter.Config{Policies: r.Policies()})
			require.NoError(t, err, "the policies are valid Sluice policies")
			_, err = New(Config{Rules: r, Limiter: lim})
			require.NoError(t, err)
		})
	}
}

func TestExampleConfigPolicies(t *testing.T) {
	t.Parallel()
	r, err := LoadFiles("testdata/envoy/example_example.yaml")
	require.NoError(t, err)
	byName := map[string]limiter.Policy{}
	for _, p := range r.Policies() {
		byName[p.Name] = p
	}
	// unlimited (bay, qux) and requests_per_unit 0 (bar_banned) take no policy.
	require.Len(t, byName, 12)
	require.Equal(t, limiter.Policy{
		Name: "rls:rl.foo.baz_shady", Rate: 3, Period: time.Minute, Burst: 3, Shadow: true,
		Description: "envoy rate limit rl.foo.baz_shady",
	}, byName["rls:rl.foo.baz_shady"])
	require.Equal(t, int64(1), byName["rls:rl.foo.baz"].Rate)
	require.Equal(t, time.Second, byName["rls:rl.foo.baz"].Period)
	require.Contains(t, byName, "rls:rl.source_cluster_proxy.destination_cluster_mock")
	require.NotContains(t, byName, "rls:rl.foo.bar_banned")
	require.NotContains(t, byName, "rls:rl.qux")
}

func TestPolicyNames(t *testing.T) {
	t.Parallel()
	require.Equal(t, "rls:mongo_cps.database_users", policyName("mongo_cps.database_users"))
	// Characters a policy name cannot hold make it end in a hash of the
	// original, so "foo*" and "foo?" stay apart.
	a, b := policyName("d.wild_foo*"), policyName("d.wild_foo?")
	require.NotEqual(t, a, b)
	require.True(t, strings.HasPrefix(a, "rls:d.wild_foo_-"), a)
	long := policyName(strings.Repeat("x", 300))
	require.Len(t, long, maxPolicyName)
	require.NotEqual(t, long, policyName(strings.Repeat("x", 301)))
	for _, n := range []string{a, b, long} {
		require.NoError(t, limiter.Policy{Name: n, Rate: 1, Period: time.Second}.Validate())
	}
}

// envoyproxy/ratelimit's own invalid configurations are refused, with the
// file, line and what is wrong.
func TestEnvoyInvalidConfigs(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		line int
		msg  string
	}{
		"bad_limit_unit.yaml":      {6, `descriptors[0].rate_limit.unit: invalid rate limit unit "foo"`},
		"bad_yaml.yaml":            {2, "invalid YAML: found unexpected end of stream"},
		"duplicate_key.yaml":       {6, `descriptors[1].key: duplicate descriptor "test-domain.key1_value1" (first at line 3)`},
		"empty_domain.yaml":        {1, "missing domain"},
		"empty_key.yaml":           {3, "descriptors[0]: descriptor has no key"},
		"misspelled_key.yaml":      {5, "descriptors[0].ratelimit: unknown key"},
		"misspelled_key2.yaml":     {7, "descriptors[0].rate_limit.requestsperunit: unknown key"},
		"non_map_list.yaml":        {3, `descriptors[0]: want a descriptor (a mapping with key, value, rate_limit, descriptors...), got "a"`},
		"non_string_key.yaml":      {1, `keys must be strings, got "0.25"`},
		"replaces_empty.yaml":      {10, "descriptors[0].descriptors[0].rate_limit.replaces[0]: empty replaces entry"},
		"replaces_self.yaml":       {8, `rate_limit.replaces[0]: a rate limit cannot replace itself ("self")`},
		"unlimited_with_unit.yaml": {6, "descriptors[0].rate_limit.unit: an unlimited rate limit takes no unit"},
	}
	files, err := filepath.Glob("testdata/invalid-envoy/*.yaml")
	require.NoError(t, err)
	require.Len(t, files, len(cases))
	for _, f := range files {
		want, ok := cases[filepath.Base(f)]
		require.True(t, ok, "no expectation for %s", f)
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			requireConfigError(t, f, want.line, want.msg)
		})
	}
}

// requireConfigError loads file and requires an error at line whose
// message holds msg, and whose text names the file and line.
func requireConfigError(t *testing.T, file string, line int, msg string) {
	t.Helper()
	_, err := LoadFiles(file)
	require.Error(t, err)
	var ces limiter.ConfigErrors
	require.True(t, errors.As(err, &ces), "%T: %v", err, err)
	for _, ce := range ces {
		if ce.Line == line && strings.Contains(ce.Error(), msg) {
			require.Equal(t, file, ce.File)
			require.True(t, strings.HasPrefix(ce.Error(), file+":"), ce.Error())
			return
		}
	}
	t.Fatalf("want an error at line %d holding %q, got:\n%v", line, msg, err)
}

func TestMalformedConfigs(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		line int
		msg  string
	}{
		"bad_bool.yaml":               {4, `descriptors[0].shadow_mode: want true or false, got "maybe"`},
		"descriptors_not_list.yaml":   {3, "descriptors: want a list of descriptors, got a mapping"},
		"duplicate_yaml_key.yaml":     {7, "descriptors[0].rate_limit: duplicate key (first at line 4)"},
		"empty.yaml":                  {0, "empty file: want a mapping with domain and descriptors"},
		"misplaced_unit.yaml":         {4, "descriptors[0].unit: unknown key (it belongs inside rate_limit)"},
		"missing_domain.yaml":         {1, "missing domain"},
		"missing_rpu.yaml":            {5, "descriptors[0].rate_limit: missing requests_per_unit"},
		"negative_rpu.yaml":           {6, `requests_per_unit: want a whole number from 0 to 4294967295, got "-5"`},
		"nested_errors.yaml":          {6, `descriptors[0].descriptors[0].rate_limit.unit: invalid rate limit unit "fortnight"`},
		"replaces_not_list.yaml":      {7, `replaces: want a list of {name: ...}, got "other"`},
		"rpu_string.yaml":             {6, `got "ten"`},
		"rpu_too_large.yaml":          {6, `got "4294967296"`},
		"rpu_too_fine.yaml":           {6, "requests_per_unit: 100000000 per 1m0s cannot be enforced: rate 100000000 per 1m0s is finer than one unit per microsecond"},
		"share_without_wildcard.yaml": {5, `share_threshold applies only to a wildcard value (one ending with '*'), not "/api"`},
		"two_documents.yaml":          {5, "one YAML document; found another"},
		"unclosed.yaml":               {3, "invalid YAML: did not find expected ',' or ']'"},
		"unit_multiplier_zero.yaml":   {4, `unit_multiplier: want a positive whole number, got "0"`},
		"unknown_top_key.yaml":        {1, "domian: unknown key (want domain or descriptors)"},
		"value_mapping.yaml":          {4, "descriptors[0].value: want a string, got a mapping"},
	}
	files, err := filepath.Glob("testdata/malformed/*.yaml")
	require.NoError(t, err)
	require.Len(t, files, len(cases))
	for _, f := range files {
		want, ok := cases[filepath.Base(f)]
		require.True(t, ok, "no expectation for %s", f)
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			requireConfigError(t, f, want.line, want.msg)
		})
	}
	// Every problem of a file is reported, not only the first.
	requireConfigError(t, "testdata/malformed/nested_errors.yaml", 8, "descriptors[0].descriptors[1].rate_limit.burst: unknown key")
}

func TestDuplicateDomainAcrossFiles(t *testing.T) {
	t.Parallel()
	_, err := LoadFiles("testdata/envoy/test_basic_config.yaml", "testdata/envoy/test_wildcard.yaml")
	require.ErrorContains(t, err, `testdata/envoy/test_wildcard.yaml:2:1: domain: domain "test-domain" is already defined at testdata/envoy/test_basic_config.yaml:2`)
}

func TestLoadDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"a.yaml":    "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"b.yml":     "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 7, unit_multiplier: 2}\n",
		"notes.txt": "not a config",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600))
	}
	r, err := LoadFiles(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, r.Domains())
	ps := r.Policies()
	require.Len(t, ps, 2)
	require.Equal(t, 48*time.Hour, ps[1].Period)

	_, err = LoadFiles(t.TempDir())
	require.ErrorContains(t, err, "holds no .yaml or .yml file")
	_, err = LoadFiles(filepath.Join(dir, "missing.yaml"))
	require.ErrorContains(t, err, "missing.yaml")
	_, err = Parse()
	require.ErrorContains(t, err, "no configuration file")
}

func TestYAML11Booleans(t *testing.T) {
	t.Parallel()
	r, err := Parse(File{Name: "b.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n    shadow_mode: yes\n    rate_limit: {unit: SECOND, requests_per_unit: 5}\n")})
	require.NoError(t, err)
	require.True(t, r.Policies()[0].Shadow)
}

// FuzzParse: no input panics, and whatever parses gives policies a
// limiter accepts.
func FuzzParse(f *testing.F) {
	for _, glob := range []string{"testdata/envoy/*.yaml", "testdata/malformed/*.yaml", "testdata/invalid-envoy/*.yaml"} {
		files, _ := filepath.Glob(glob)
		for _, name := range files {
			data, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse(File{Name: "fuzz.yaml", Data: data})
		if err != nil {
			var ces limiter.ConfigErrors
			if !errors.As(err, &ces) || len(ces) == 0 {
				t.Fatalf("error is not ConfigErrors: %T %v", err, err)
			}
			return
		}
		lim, err := limiter.New(limiter.Config{Policies: r.Policies()})
		if err != nil {
			t.Fatalf("parsed rules give invalid policies: %v", err)
		}
		if _, err := New(Config{Rules: r, Limiter: lim}); err != nil {
			t.Fatal(err)
		}
	})
}
