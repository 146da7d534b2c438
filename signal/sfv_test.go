package signal

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSFList(t *testing.T) {
	t.Parallel()
	type m struct {
		v      sfItem
		params []sfParam
	}
	i := func(n int64) sfItem { return sfItem{Kind: sfInteger, Int: n} }
	s := func(v string) sfItem { return sfItem{Kind: sfString, Str: v} }
	tok := func(v string) sfItem { return sfItem{Kind: sfToken, Str: v} }
	yes := sfItem{Kind: sfBoolean, Bool: true}
	for _, tc := range []struct {
		in   string
		ok   bool
		want []m
	}{
		{`"a";q=1;w=2`, true, []m{{s("a"), []sfParam{{"q", i(1)}, {"w", i(2)}}}}},
		{`  "a" ,	"b";x ,c`, true, []m{{s("a"), nil}, {s("b"), []sfParam{{"x", yes}}}, {tok("c"), nil}}},
		{`"a";q=1;q=2`, true, []m{{s("a"), []sfParam{{"q", i(2)}}}}}, // last value wins
		{`"a";q=1, "b";q=2`, true, []m{{s("a"), []sfParam{{"q", i(1)}}}, {s("b"), []sfParam{{"q", i(2)}}}}},
		{`-12, 1.5, ?0, @1659578233, :AQID:, %"f%c3%bc", foo/bar:baz`, true, []m{
			{i(-12), nil}, {sfItem{Kind: sfDecimal, Dec: 1.5}, nil}, {sfItem{Kind: sfBoolean}, nil},
			{sfItem{Kind: sfDate, Int: 1659578233}, nil}, {sfItem{Kind: sfBytes, Str: "AQID"}, nil},
			{sfItem{Kind: sfDisplay, Str: "fü"}, nil}, {tok("foo/bar:baz"), nil}}},
		{`("a" 1);p, 2`, true, []m{{sfItem{Kind: sfInnerList}, []sfParam{{"p", yes}}}, {i(2), nil}}},
		{`"a\\b\"c"`, true, []m{{s(`a\b"c`), nil}}},
		{``, true, nil},
		{`999999999999999`, true, []m{{i(999999999999999), nil}}},
		// Invalid: each must fail as a whole.
		{`1000000000000000`, false, nil}, // 16 digits
		{`1.2345`, false, nil},           // 4 fraction digits
		{`1234567890123.5`, false, nil},  // 13 integer digits
		{`1.`, false, nil},
		{`"a",`, false, nil},    // trailing comma
		{`"a" "b"`, false, nil}, // missing comma
		{`"a`, false, nil},      // unterminated
		{`"a\x"`, false, nil},   // bad escape
		{`"é"`, false, nil},     // not ASCII
		{`"a";Q=1`, false, nil}, // uppercase key
		{`"a";=1`, false, nil},
		{`?2`, false, nil},
		{`@1.5`, false, nil},
		{`%"%C3%BC"`, false, nil}, // uppercase hex
		{`%"%ff"`, false, nil},    // not UTF-8
		{`:a b:`, false, nil},
		{`("a"`, false, nil},
		{`("a"1)`, false, nil},
		{`-`, false, nil},
		{`#`, false, nil},
		// Whitespace: SP or HTAB around commas, SP after a semicolon,
		// nowhere around = or before a semicolon.
		{"1\t,\t2", true, []m{{i(1), nil}, {i(2), nil}}},
		{`1; a=2`, true, []m{{i(1), []sfParam{{"a", i(2)}}}}},
		{`1 ;a=2`, false, nil},
		{`1;a =2`, false, nil},
		{`1;a= 2`, false, nil},
		{`(1 2) ;a`, false, nil},
		{"\t1", false, nil},
		{`--1`, false, nil},
		{`- 1`, false, nil},
		{`1..4`, false, nil},
	} {
		members, params, ok := parseSFList(tc.in, nil, nil)
		require.Equal(t, tc.ok, ok, "%q", tc.in)
		if !ok {
			continue
		}
		var got []m
		for _, mm := range members {
			var ps []sfParam
			if mm.Hi > mm.Lo {
				ps = params[mm.Lo:mm.Hi]
			}
			got = append(got, m{mm.Value, ps})
		}
		require.Equal(t, tc.want, got, "%q", tc.in)
	}
}

func TestParseSFDictionary(t *testing.T) {
	t.Parallel()
	members, _, ok := parseSFDictionary(`limit=100, remaining=50, reset=30, remaining=7, flag`, nil, nil)
	require.True(t, ok)
	got := map[string]sfItem{}
	for _, m := range members {
		got[m.Key] = m.Value
	}
	require.Equal(t, map[string]sfItem{
		"limit":     {Kind: sfInteger, Int: 100},
		"remaining": {Kind: sfInteger, Int: 7},
		"reset":     {Kind: sfInteger, Int: 30},
		"flag":      {Kind: sfBoolean, Bool: true},
	}, got)
	for _, bad := range []string{`a=1,`, `A=1`, `a=1 b=2`, `"a"=1`} {
		_, _, ok := parseSFDictionary(bad, nil, nil)
		require.False(t, ok, "%q", bad)
	}
}
