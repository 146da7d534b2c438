package limiter_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store"
)

func TestLoadFileExample(t *testing.T) {
	t.Parallel()
	ps, err := limiter.LoadFile("../examples/policies.yaml")
	require.NoError(t, err)
	require.Equal(t, []limiter.Policy{
		{
			Name: "exchange-weight", Algorithm: store.GCRA, Rate: 1200, Period: time.Minute, Burst: 100,
			Description: "exchange request weight per IP",
		},
		{
			Name: "exchange-orders", Algorithm: store.FixedWindow, Rate: 50, Period: 10 * time.Second,
			Description: "orders per 10 s per account",
		},
		{
			Name: "api-hourly", Algorithm: store.SlidingWindow, Rate: 5000, Period: time.Hour,
			Description: "REST requests per hour per token",
		},
		{
			Name: "crawler-per-host", Algorithm: store.GCRA, Rate: 2, Period: time.Second, Burst: 4, Shadow: true,
			Description: "polite crawling per host (shadow mode)",
		},
		{
			Name: "shopify-bulk", Algorithm: store.Concurrency, Permits: 5, TTL: 30 * time.Second,
			Description: "concurrent bulk operations per shop",
		},
	}, ps)
	l, err := limiter.New(limiter.Config{Policies: ps})
	require.NoError(t, err)
	require.Len(t, l.Policies(), 5)
}

func TestLoadFileErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	_, err := limiter.LoadFile(filepath.Join(dir, "missing.yaml"))
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorContains(t, err, "limiter: policy file")

	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("policies:\n  api:\n    rate: 0\n    period: 1s\n"), 0o600))
	_, err = limiter.LoadFile(bad)
	require.EqualError(t, err, bad+":3:11: policies.api.rate: want a positive integer, got \"0\"")

	big := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(big, []byte("# "+strings.Repeat("x", 1<<20)+"\npolicies: {}\n"), 0o600))
	_, err = limiter.LoadFile(big)
	require.EqualError(t, err, big+": file is larger than 1048576 bytes")
}

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yaml string
		want []limiter.Policy
	}{
		{
			name: "every key",
			yaml: `
policies:
  a:
    algorithm: gcra
    rate: 1_000
    period: 1500ms
    burst: 20
    shadow: false
    description: "all: the keys"
  b:
    algorithm: fixed_window
    limit: 5
    window: 24h
    shadow: true
  c:
    algorithm: sliding_window
    rate: 7
    unit: Minute
`,
			want: []limiter.Policy{
				{Name: "a", Algorithm: store.GCRA, Rate: 1000, Period: 1500 * time.Millisecond, Burst: 20, Description: "all: the keys"},
				{Name: "b", Algorithm: store.FixedWindow, Rate: 5, Period: 24 * time.Hour, Shadow: true},
				{Name: "c", Algorithm: store.SlidingWindow, Rate: 7, Period: time.Minute},
			},
		},
		{
			name: "flow style, defaults",
			yaml: `{policies: {"org/api:v2": {rate: 3, unit: day}}}`,
			want: []limiter.Policy{{Name: "org/api:v2", Rate: 3, Period: 24 * time.Hour}},
		},
		{name: "no policies", yaml: "policies:\n", want: nil},
		{name: "empty mapping", yaml: "policies: {}\n", want: nil},
		{name: "comments and a document marker", yaml: "# policies\n---\npolicies: # none yet\n", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ps, err := limiter.Parse("p.yaml", []byte(tt.yaml))
			require.NoError(t, err)
			if len(tt.want) == 0 {
				require.Empty(t, ps)
				return
			}
			require.Equal(t, tt.want, ps)
		})
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	const unknownKey = "unknown key (want algorithm, rate, limit, period, window, unit, burst, shadow, on_store_outage, local_share, permits, ttl or description)"
	const badDuration = "want a positive duration such as 1s, 10s, 1m or 24h, got "
	tests := []struct {
		name string
		yaml string
		want []string // every error, exactly, in file order
	}{
		{
			name: "unknown key",
			yaml: "policies:\n  api:\n    rate: 10\n    period: 1s\n    bursty: 5\n",
			want: []string{"p.yaml:5:5: policies.api.bursty: " + unknownKey},
		},
		{
			name: "unknown top-level key",
			yaml: "policies:\n  api: {rate: 1, period: 1s}\nversion: 2\n",
			want: []string{"p.yaml:3:1: version: unknown top-level key (want 'policies' or 'auth')"},
		},
		{
			name: "no policies key",
			yaml: "{}\n",
			want: []string{"p.yaml:1:1: no 'policies' key"},
		},
		{
			name: "top level not a mapping",
			yaml: "- policies\n",
			want: []string{"p.yaml:1:1: want a mapping, got a list"},
		},
		{
			name: "policies not a mapping",
			yaml: "policies: [api]\n",
			want: []string{"p.yaml:1:11: policies: want a mapping, got a list"},
		},
		{
			name: "bad algorithm",
			yaml: "policies:\n  api:\n    algorithm: leaky_bucket\n    rate: 1\n    period: 1s\n",
			want: []string{`p.yaml:3:16: policies.api.algorithm: unknown algorithm "leaky_bucket" (want gcra, fixed_window, sliding_window or concurrency)`},
		},
		{
			name: "empty algorithm",
			yaml: "policies:\n  api: {algorithm: '', rate: 1, period: 1s}\n",
			want: []string{`p.yaml:2:20: policies.api.algorithm: unknown algorithm "" (want gcra, fixed_window, sliding_window or concurrency)`},
		},
		{
			name: "rate not an integer",
			yaml: "policies:\n  api:\n    rate: ten\n    period: 1s\n",
			want: []string{`p.yaml:3:11: policies.api.rate: want a positive integer, got "ten"`},
		},
		{
			name: "rate quoted",
			yaml: "policies:\n  api:\n    rate: \"10\"\n    period: 1s\n",
			want: []string{`p.yaml:3:11: policies.api.rate: want a positive integer, got "10"`},
		},
		{
			name: "rate zero",
			yaml: "policies:\n  api: {rate: 0, period: 1s}\n",
			want: []string{`p.yaml:2:15: policies.api.rate: want a positive integer, got "0"`},
		},
		{
			name: "rate negative",
			yaml: "policies:\n  api: {rate: -5, period: 1s}\n",
			want: []string{`p.yaml:2:15: policies.api.rate: want a positive integer, got "-5"`},
		},
		{
			name: "rate float",
			yaml: "policies:\n  api: {rate: 1.5, period: 1s}\n",
			want: []string{`p.yaml:2:15: policies.api.rate: want a positive integer, got "1.5"`},
		},
		{
			name: "rate overflows",
			yaml: "policies:\n  api: {rate: 99999999999999999999, period: 1s}\n",
			want: []string{`p.yaml:2:15: policies.api.rate: want a positive integer, got "99999999999999999999"`},
		},
		{
			name: "rate a list",
			yaml: "policies:\n  api: {rate: [1], period: 1s}\n",
			want: []string{`p.yaml:2:15: policies.api.rate: want a positive integer, got a list`},
		},
		{
			name: "rate null",
			yaml: "policies:\n  api:\n    rate:\n    period: 1s\n",
			want: []string{`p.yaml:3:10: policies.api.rate: want a positive integer, got nothing`},
		},
		{
			name: "burst zero",
			yaml: "policies:\n  api: {rate: 1, period: 1s, burst: 0}\n",
			want: []string{`p.yaml:2:37: policies.api.burst: want a positive integer, got "0"`},
		},
		{
			name: "both rate and limit",
			yaml: "policies:\n  api:\n    rate: 1\n    limit: 2\n    period: 1s\n",
			want: []string{"p.yaml:4:5: policies.api.limit: give either rate or limit, not both (other at line 3)"},
		},
		{
			name: "period and unit",
			yaml: "policies:\n  api:\n    rate: 1\n    period: 1s\n    unit: second\n",
			want: []string{"p.yaml:5:5: policies.api.unit: give one of period, window or unit (period at line 4)"},
		},
		{
			name: "window and period",
			yaml: "policies:\n  api:\n    rate: 1\n    window: 1s\n    period: 1s\n",
			want: []string{"p.yaml:5:5: policies.api.period: give one of period, window or unit (window at line 4)"},
		},
		{
			name: "duration without a unit",
			yaml: "policies:\n  api:\n    rate: 1\n    period: 10\n",
			want: []string{`p.yaml:4:13: policies.api.period: ` + badDuration + `"10"`},
		},
		{
			name: "negative duration",
			yaml: "policies:\n  api:\n    rate: 1\n    window: -1s\n",
			want: []string{`p.yaml:4:13: policies.api.window: ` + badDuration + `"-1s"`},
		},
		{
			name: "bad duration",
			yaml: "policies:\n  api:\n    rate: 1\n    period: 1 minute\n",
			want: []string{`p.yaml:4:13: policies.api.period: ` + badDuration + `"1 minute"`},
		},
		{
			name: "bad unit",
			yaml: "policies:\n  api:\n    rate: 1\n    unit: fortnight\n",
			want: []string{`p.yaml:4:11: policies.api.unit: want second, minute, hour or day, got "fortnight"`},
		},
		{
			name: "burst on fixed window",
			yaml: "policies:\n  orders:\n    algorithm: fixed_window\n    limit: 50\n    window: 10s\n    burst: 5\n",
			want: []string{"p.yaml:6:5: policies.orders.burst: burst applies only to gcra, not fixed_window"},
		},
		{
			name: "burst before sliding window",
			yaml: "policies:\n  orders:\n    burst: 5\n    algorithm: sliding_window\n    limit: 50\n    window: 10s\n",
			want: []string{"p.yaml:3:5: policies.orders.burst: burst applies only to gcra, not sliding_window"},
		},
		{
			name: "missing rate",
			yaml: "policies:\n  api:\n    period: 1s\n",
			want: []string{"p.yaml:2:3: policies.api: missing rate (or limit)"},
		},
		{
			name: "missing period",
			yaml: "policies:\n  api:\n    limit: 5\n",
			want: []string{"p.yaml:2:3: policies.api: missing period (or window, or unit)"},
		},
		{
			name: "missing both",
			yaml: "policies:\n  api: {}\n",
			want: []string{
				"p.yaml:2:3: policies.api: missing rate (or limit)",
				"p.yaml:2:3: policies.api: missing period (or window, or unit)",
			},
		},
		{
			name: "duplicate policy name",
			yaml: "policies:\n  api: {rate: 1, period: 1s}\n  api: {rate: 2, period: 1s}\n",
			want: []string{"p.yaml:3:3: policies.api: duplicate key (first at line 2)"},
		},
		{
			name: "duplicate key",
			yaml: "policies:\n  api:\n    rate: 1\n    period: 1s\n    period: 2s\n",
			want: []string{"p.yaml:5:5: policies.api.period: duplicate key (first at line 4)"},
		},
		{
			name: "duplicate top-level key",
			yaml: "policies: {}\npolicies: {}\n",
			want: []string{"p.yaml:2:1: policies: duplicate key (first at line 1)"},
		},
		{
			name: "invalid policy name",
			yaml: "policies:\n  \"my api\": {rate: 1, period: 1s}\n",
			want: []string{`p.yaml:2:3: policies.my api: policy name "my api": only letters, digits and _ - . : / are allowed`},
		},
		{
			name: "null policy name",
			yaml: "policies:\n  ~: {rate: 1, period: 1s}\n",
			want: []string{`p.yaml:2:3: policies.~: policy name "~": only letters, digits and _ - . : / are allowed`},
		},
		{
			name: "key not a string",
			yaml: "policies:\n  ? [a, b]\n  : {rate: 1, period: 1s}\n",
			want: []string{"p.yaml:2:5: policies: keys must be strings, got a list"},
		},
		{
			name: "policy not a mapping",
			yaml: "policies:\n  api: 5\n",
			want: []string{`p.yaml:2:8: policies.api: want a mapping, got "5"`},
		},
		{
			name: "policy empty",
			yaml: "policies:\n  api:\n",
			want: []string{"p.yaml:2:7: policies.api: want a mapping, got nothing"},
		},
		{
			name: "policy an alias",
			yaml: "policies:\n  a: &x {rate: 1, period: 1s}\n  b: *x\n",
			want: []string{"p.yaml:3:6: policies.b: want a mapping, got an alias"},
		},
		{
			name: "merge key",
			yaml: "policies:\n  a: &x {rate: 1, period: 1s}\n  b:\n    <<: *x\n",
			want: []string{
				"p.yaml:3:3: policies.b: missing rate (or limit)",
				"p.yaml:3:3: policies.b: missing period (or window, or unit)",
				"p.yaml:4:5: policies.b.<<: " + unknownKey,
			},
		},
		{
			name: "shadow not a boolean",
			yaml: "policies:\n  api: {rate: 1, period: 1s, shadow: yes}\n",
			want: []string{`p.yaml:2:38: policies.api.shadow: want true or false, got "yes"`},
		},
		{
			name: "description a list",
			yaml: "policies:\n  api: {rate: 1, period: 1s, description: [x]}\n",
			want: []string{`p.yaml:2:43: policies.api.description: want a string, got a list`},
		},
		{
			name: "multiple documents",
			yaml: "policies: {}\n---\npolicies: {}\n",
			want: []string{"p.yaml:2:1: a policy file holds one YAML document; found another"},
		},
		{
			name: "second document malformed",
			yaml: "policies: {}\n---\npolicies: [\n",
			want: []string{"p.yaml: a policy file holds one YAML document; found another: line 3: did not find expected node content"},
		},
		{
			name: "empty file",
			yaml: "",
			want: []string{"p.yaml: empty policy file: want a top-level 'policies' mapping"},
		},
		{
			name: "only comments",
			yaml: "# nothing here\n",
			want: []string{"p.yaml: empty policy file: want a top-level 'policies' mapping"},
		},
		{
			name: "syntax error",
			yaml: "policies:\n  api:\n    rate: [\n",
			want: []string{"p.yaml: line 3: did not find expected node content"},
		},
		{
			name: "tab indentation",
			yaml: "policies:\n\tapi: {}\n",
			want: []string{"p.yaml: line 2: found character that cannot start any token"},
		},
		{
			name: "rate finer than a microsecond",
			yaml: "policies:\n  api:\n    rate: 2000000\n    period: 1s\n",
			want: []string{`p.yaml:2:3: policies.api: store: invalid limit "api": gcra: invalid limit: rate 2000000 per 1s is finer than one unit per microsecond`},
		},
		{
			name: "period finer than a microsecond",
			yaml: "policies:\n  api: {algorithm: fixed_window, limit: 1, window: 500ns}\n",
			want: []string{`p.yaml:2:3: policies.api: store: invalid limit "api": window: invalid limit: window must be at least 1us, got 500ns`},
		},
		{
			name: "sliding product too large",
			yaml: "policies:\n  api:\n    algorithm: sliding_window\n    limit: 1000000000\n    window: 24h\n",
			want: []string{`p.yaml:2:3: policies.api: store: invalid limit "api": window: invalid limit: sliding limit 1000000000 per 24h0m0s is too large (limit x window must stay under 2^53 microseconds); use a fixed window or gcra`},
		},
		{
			name: "burst too large",
			yaml: "policies:\n  api: {rate: 1, period: 2562047h, burst: 9000000000000000000}\n",
			want: []string{`p.yaml:2:3: policies.api: store: invalid limit "api": gcra: invalid limit: burst 9000000000000000000 is too large for an interval of 9223369200000000us`},
		},
		{
			name: "several errors are all reported",
			yaml: `policies:
  ok: {rate: 1, period: 1s}
  one:
    rate: 0
    period: 1s
  two:
    algorithm: fixed_window
    limit: 5
    unit: week
    burst: 2
  three: nope
extra: 1
`,
			want: []string{
				`p.yaml:4:11: policies.one.rate: want a positive integer, got "0"`,
				`p.yaml:9:11: policies.two.unit: want second, minute, hour or day, got "week"`,
				"p.yaml:10:5: policies.two.burst: burst applies only to gcra, not fixed_window",
				`p.yaml:11:10: policies.three: want a mapping, got "nope"`,
				"p.yaml:12:1: extra: unknown top-level key (want 'policies' or 'auth')",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ps, err := limiter.Parse("p.yaml", []byte(tt.yaml))
			require.Error(t, err)
			require.Nil(t, ps, "no policies from a bad file")
			require.Equal(t, strings.Join(tt.want, "\n"), err.Error())

			var ces limiter.ConfigErrors
			require.ErrorAs(t, err, &ces)
			require.Len(t, ces, len(tt.want))
			var ce *limiter.ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, "p.yaml", ce.File)
			require.Equal(t, tt.want[0], ce.Error(), "errors.As finds the first")
			for i, e := range ces {
				require.Equal(t, tt.want[i], e.Error())
				require.True(t, errors.Is(err, e), "errors.Is reaches error %d", i)
			}
		})
	}
}

func TestParseTooLarge(t *testing.T) {
	t.Parallel()
	_, err := limiter.Parse("big.yaml", make([]byte, 1<<20+1))
	require.EqualError(t, err, "big.yaml: file is larger than 1048576 bytes")
	var ce *limiter.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Zero(t, ce.Line)
}

func TestConfigErrorFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  limiter.ConfigError
		want string
	}{
		{limiter.ConfigError{File: "f.yaml", Line: 3, Column: 7, Path: "policies.a.rate", Msg: "bad"}, "f.yaml:3:7: policies.a.rate: bad"},
		{limiter.ConfigError{Line: 3, Column: 7, Path: "policies", Msg: "bad"}, "3:7: policies: bad"},
		{limiter.ConfigError{File: "f.yaml", Msg: "bad"}, "f.yaml: bad"},
		{limiter.ConfigError{File: "f.yaml", Path: "x", Msg: "bad"}, "f.yaml: x: bad"},
		{limiter.ConfigError{Msg: "bad"}, "bad"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, tt.err.Error())
	}
	es := limiter.ConfigErrors{&tests[0].err, &tests[2].err}
	require.Equal(t, "f.yaml:3:7: policies.a.rate: bad\nf.yaml: bad", es.Error())
	require.Len(t, es.Unwrap(), 2)
}
