package auth_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/auth"
)

func TestParseScopes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want auth.Scope
		err  string
	}{
		{"take", auth.Take, ""},
		{"take, lease", auth.Take | auth.Lease, ""},
		{"*", auth.All, ""},
		{"read,admin", auth.Read | auth.Admin, ""},
		{"", 0, "empty scope name"},
		{"take,", 0, "empty scope name"},
		{"public", 0, `unknown scope "public"`},
		{"root", 0, `unknown scope "root"`},
	} {
		got, err := auth.ParseScopes(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	require.Equal(t, "take,lease", (auth.Lease | auth.Take).String())
	require.Equal(t, "*", auth.All.String())
}

func TestTokenAndHash(t *testing.T) {
	t.Parallel()
	a, b := auth.NewToken(), auth.NewToken()
	require.NotEqual(t, a, b)
	require.True(t, strings.HasPrefix(a, auth.TokenPrefix))
	require.Len(t, a, len(auth.TokenPrefix)+43)
	// The hash is SHA-256 in hex: the known vector of "abc".
	require.Equal(t, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", auth.Hash("abc"))
	require.Equal(t, "w take,lease sha256:"+auth.Hash(a), auth.Line("w", auth.Take|auth.Lease, a))
}

func tokens(t *testing.T, lines ...string) *auth.Tokens {
	t.Helper()
	ts, err := auth.ParseFile("tokens.txt", []byte(strings.Join(lines, "\n")))
	require.NoError(t, err)
	return ts
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	worker, ops := auth.NewToken(), auth.NewToken()
	ts := tokens(t, "# comment", "", auth.Line("worker", auth.Take|auth.Read, worker), auth.Line("ops", auth.All, ops))
	require.Equal(t, 2, ts.Len())
	for _, tc := range []struct {
		name, header string
		need         auth.Scope
		who          string
		err          error
	}{
		{"ok", "Bearer " + worker, auth.Take, "worker", nil},
		{"scheme any case", "bearer " + worker, auth.Read, "worker", nil},
		{"all", "Bearer " + ops, auth.Admin, "ops", nil},
		{"forbidden", "Bearer " + worker, auth.Admin, "worker", auth.ErrForbidden},
		{"none", "", auth.Take, "", auth.ErrNoToken},
		{"basic", "Basic dXNlcjpwYXNz", auth.Take, "", auth.ErrMalformed},
		{"no token", "Bearer ", auth.Take, "", auth.ErrMalformed},
		{"two words", "Bearer a b", auth.Take, "", auth.ErrMalformed},
		{"unknown", "Bearer " + auth.NewToken(), auth.Take, "", auth.ErrUnknownToken},
		{"the hash is not the token", "Bearer " + auth.Hash(worker), auth.Take, "", auth.ErrUnknownToken},
		{"a prefix of the token", "Bearer " + worker[:len(worker)-1], auth.Take, "", auth.ErrUnknownToken},
	} {
		p, err := ts.Authenticate(tc.header, tc.need)
		require.ErrorIs(t, err, tc.err, tc.name)
		if tc.err == nil {
			require.NoError(t, err, tc.name)
		}
		require.Equal(t, tc.who, p.Name, tc.name)
	}
	// A nil or empty set knows no token.
	var none *auth.Tokens
	_, err := none.Authenticate("Bearer "+worker, auth.Take)
	require.ErrorIs(t, err, auth.ErrUnknownToken)
}

func TestKeyringSwap(t *testing.T) {
	t.Parallel()
	old, next := auth.NewToken(), auth.NewToken()
	k := auth.NewKeyring(tokens(t, auth.Line("a", auth.Take, old)))
	_, err := k.Authenticate("Bearer "+old, auth.Take)
	require.NoError(t, err)
	k.Store(tokens(t, auth.Line("b", auth.Take, next)))
	_, err = k.Authenticate("Bearer "+old, auth.Take)
	require.ErrorIs(t, err, auth.ErrUnknownToken, "a token removed by a reload is refused")
	p, err := k.Authenticate("Bearer "+next, auth.Take)
	require.NoError(t, err)
	require.Equal(t, "b", p.Name)
	var zero auth.Keyring
	_, err = zero.Authenticate("Bearer "+next, auth.Take)
	require.ErrorIs(t, err, auth.ErrUnknownToken)
}

func TestParseFileErrors(t *testing.T) {
	t.Parallel()
	h := auth.Hash("x")
	for _, tc := range []struct {
		name, file, err string
	}{
		{"fields", "a take", "tokens.txt:1: want NAME SCOPES sha256:HEX, got 2 fields"},
		{"scope", "\na root sha256:" + h, `tokens.txt:2: unknown scope "root"`},
		{"no prefix", "a take " + h, `tokens.txt:1: the hash must start with "sha256:"`},
		{"short hash", "a take sha256:abcd", `tokens.txt:1: token "a": bad sha256`},
		{"plain token", "a take sha256:" + auth.TokenPrefix + "abc", "this is a token, not its hash"},
		{"name", "a/b take sha256:" + h, `tokens.txt:1: token name "a/b"`},
		{"dup name", "a take sha256:" + h + "\na take sha256:" + auth.Hash("y"), `tokens.txt:2: token name "a" is used twice (first at line 1)`},
		{"dup hash", "a take sha256:" + h + "\nb take sha256:" + h, `same hash as token "a"`},
	} {
		_, err := auth.ParseFile("tokens.txt", []byte(tc.file))
		require.ErrorContains(t, err, tc.err, tc.name)
		require.True(t, strings.HasPrefix(err.Error(), "auth: "), tc.name)
	}
	ts, err := auth.ParseFile("empty", nil)
	require.NoError(t, err)
	require.Equal(t, 0, ts.Len())
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	tok := auth.NewToken()
	ts, found, err := auth.ParseConfig("p.yaml", []byte(`policies:
  api: {rate: 1, period: 1s}
auth:
  tokens:
    - name: w
      scopes: [take, read]
      sha256: `+auth.Hash(tok)+`
    - name: o
      scopes: "*"
      sha256: sha256:`+auth.Hash("other")+`
`))
	require.NoError(t, err)
	require.True(t, found)
	p, err := ts.Authenticate("Bearer "+tok, auth.Read)
	require.NoError(t, err)
	require.Equal(t, auth.Principal{Name: "w", Scopes: auth.Take | auth.Read}, p)

	_, found, err = auth.ParseConfig("p.yaml", []byte("policies: {}\n"))
	require.NoError(t, err)
	require.False(t, found)

	for _, tc := range []struct{ name, doc, err string }{
		{"not a mapping", "auth: [1]", "p.yaml:1:7: auth: want a mapping"},
		{"unknown key", "auth:\n  users: []", "p.yaml:2:3: auth.users: unknown key"},
		{"item", "auth:\n  tokens:\n    - 3", "p.yaml:3:7: auth.tokens[0]: want a mapping"},
		{"missing", "auth:\n  tokens:\n    - {name: a, scopes: take}", "auth.tokens[0]: sha256 is required"},
		{"bad scope", "auth:\n  tokens:\n    - {name: a, scopes: [take, fly], sha256: " + auth.Hash("a") + "}", `auth.tokens[0].scopes: unknown scope "fly"`},
		{"bad hash", "auth:\n  tokens:\n    - {name: a, scopes: take, sha256: nope}", `auth.tokens[0]: token "a": bad sha256`},
		{"field", "auth:\n  tokens:\n    - {name: a, scope: take}", "auth.tokens[0].scope: unknown key"},
	} {
		_, _, err := auth.ParseConfig("p.yaml", []byte(tc.doc))
		require.ErrorContains(t, err, tc.err, tc.name)
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	_, err := auth.New([]auth.Spec{{Name: "a", Scopes: auth.Public, SHA256: auth.Hash("a")}})
	require.ErrorContains(t, err, "scopes must be")
	_, err = auth.New([]auth.Spec{{Name: "a", Scopes: 0, SHA256: auth.Hash("a")}})
	require.ErrorContains(t, err, "scopes must be")
	require.False(t, errors.Is(err, auth.ErrForbidden))
}

func FuzzParseFile(f *testing.F) {
	f.Add([]byte("a take,lease sha256:" + auth.Hash("x") + "\n# c\n"))
	f.Add([]byte("a * sha256:zz"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ts, err := auth.ParseFile("f", data)
		if err != nil {
			require.True(t, strings.HasPrefix(err.Error(), "auth: "))
			return
		}
		// Every line that is not blank or a comment is one token.
		n := 0
		for _, l := range strings.Split(string(data), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				n++
			}
		}
		require.Equal(t, n, ts.Len())
	})
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("auth:\n  tokens:\n    - {name: a, scopes: take, sha256: " + auth.Hash("a") + "}\n"))
	f.Add([]byte("auth: {tokens: ~}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _, _ = auth.ParseConfig("f", data) // never panics
	})
}

// BenchmarkAuthenticate is the cost auth adds to a request: hashing the
// token and comparing it with every one of 10 (b.ReportAllocs).
func BenchmarkAuthenticate(b *testing.B) {
	var lines []string
	var tok string
	for i := 0; i < 10; i++ {
		tok = auth.NewToken()
		lines = append(lines, auth.Line("w"+string(rune('a'+i)), auth.Take, tok))
	}
	ts, err := auth.ParseFile("t", []byte(strings.Join(lines, "\n")))
	require.NoError(b, err)
	k := auth.NewKeyring(ts)
	header := "Bearer " + tok
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := k.Authenticate(header, auth.Take); err != nil {
				b.Fatal(err)
			}
		}
	})
}
