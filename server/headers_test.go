package server

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store"
)

func TestPolicyHeaderItem(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p    limiter.Policy
		want string
	}{
		{limiter.Policy{Name: "api", Rate: 10, Period: time.Second}, `"api";q=10;w=1`},
		{limiter.Policy{Name: "w", Rate: 1200, Period: time.Minute, Burst: 100}, `"w";q=1200;w=60`},
		{limiter.Policy{Name: "day", Algorithm: store.FixedWindow, Rate: 5000, Period: 24 * time.Hour}, `"day";q=5000;w=86400`},
		// Sub-second and fractional periods: over the next whole second,
		// quota rounded down.
		{limiter.Policy{Name: "half", Rate: 10, Period: 500 * time.Millisecond}, `"half";q=20;w=1`},
		{limiter.Policy{Name: "odd", Rate: 1, Period: 1500 * time.Millisecond}, `"odd";q=1;w=2`},
		{limiter.Policy{Name: "odd3", Rate: 3, Period: 1500 * time.Millisecond}, `"odd3";q=4;w=2`},
		{limiter.Policy{Name: "fine", Rate: 3, Period: 7 * time.Microsecond}, `"fine";q=428571;w=1`},
		// Structured Field integers have at most 15 digits.
		{limiter.Policy{Name: "huge", Rate: 5_000_000_000_000_000, Period: 5_000_000_000 * time.Second}, `"huge";q=999999999999999;w=5000000000`},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, policyHeaderItem(tt.p), tt.p.Name)
	}
}

func TestRateLimitItem(t *testing.T) {
	t.Parallel()
	d := limiter.Decision{Policy: "a", Remaining: 3, ResetAfter: 1001 * time.Millisecond}
	require.Equal(t, `"a";r=3;t=2`, rateLimitItem(d))
	d = limiter.Decision{Policy: "a", Remaining: -1, ResetAfter: -time.Second}
	require.Equal(t, `"a";r=0;t=0`, rateLimitItem(d))
}

func TestSFString(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	writeSFString(&b, "a\"b\\c\x01é")
	require.Equal(t, `"a\"b\\c???"`, b.String())
}

func TestCeil(t *testing.T) {
	t.Parallel()
	require.Equal(t, int64(0), ceilMillis(0))
	require.Equal(t, int64(1), ceilMillis(time.Nanosecond))
	require.Equal(t, int64(100), ceilMillis(100*time.Millisecond))
	require.Equal(t, int64(9223372036855), ceilMillis(time.Duration(1<<63-1)))
	require.Equal(t, int64(9223372037), ceilSeconds(time.Duration(1<<63-1)))
	require.Equal(t, "1", retryAfterSeconds(0))
	require.Equal(t, "1", retryAfterSeconds(time.Millisecond))
	require.Equal(t, "2", retryAfterSeconds(1001*time.Millisecond))
}

func TestParseCost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw  string
		want int64
		msg  string
	}{
		{"", 1, ""},
		{"null", 1, ""},
		{"0", 0, ""},
		{"-0", 0, ""},
		{"7", 7, ""},
		{"9007199254740992", 1 << 53, ""},
		{"9007199254740993", 0, "is too large"},
		{"18446744073709551616", 0, "is too large"},
		{"-3", 0, "must not be negative"},
		{"-", 0, "whole number"},
		{"2.0", 0, "whole number"},
		{"[1]", 0, "whole number"},
		{`"1"`, 0, "JSON number"},
	}
	for _, tt := range tests {
		var raw json.RawMessage
		if tt.raw != "" {
			raw = json.RawMessage(tt.raw)
		}
		got, msg := parseCost(raw)
		if tt.msg == "" {
			require.Empty(t, msg, tt.raw)
			require.Equal(t, tt.want, got, tt.raw)
		} else {
			require.Contains(t, msg, tt.msg, tt.raw)
		}
	}
}

func TestPointer(t *testing.T) {
	t.Parallel()
	require.Equal(t, "#", pointer())
	require.Equal(t, "#/items/2/cost", pointer("items", "2", "cost"))
	require.Equal(t, "#/a~1b/c~0d/e%20f/%22", pointer("a/b", "c~d", "e f", `"`))
}
