package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
)

func TestCheckID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, s string
		max     int
		reason  string // "" for valid
	}{
		{"ascii", "user:42/GET", store.MaxIDBytes, ""},
		{"utf8", "tenant:é中🙂", store.MaxIDBytes, ""},
		{"at bound", strings.Repeat("a", 512), store.MaxIDBytes, ""},
		{"nbsp is not control", "a\u00a0b", store.MaxIDBytes, ""},
		{"replacement char is text", "a\ufffdb", store.MaxIDBytes, ""},
		{"empty", "", store.MaxIDBytes, "is empty"},
		{"over bound", strings.Repeat("a", 513), store.MaxIDBytes, "is 513 bytes, longer than 512"},
		{"over small bound", "abcd", 3, "is 4 bytes, longer than 3"},
		{"multibyte over bound", strings.Repeat("é", 129), 256, "is 258 bytes, longer than 256"},
		{"nul", "a\x00b", store.MaxIDBytes, "contains control character U+0000 at byte 1"},
		{"tab", "\tb", store.MaxIDBytes, "contains control character U+0009 at byte 0"},
		{"newline", "a\n", store.MaxIDBytes, "contains control character U+000A at byte 1"},
		{"unit separator", "a\x1f", store.MaxIDBytes, "contains control character U+001F at byte 1"},
		{"del", "a\x7f", store.MaxIDBytes, "contains control character U+007F at byte 1"},
		{"c1 nel", "é\u0085", store.MaxIDBytes, "contains control character U+0085 at byte 2"},
		{"c1 last", "\u009f", store.MaxIDBytes, "contains control character U+009F at byte 0"},
		{"invalid byte", "a\xffb", store.MaxIDBytes, "is not valid UTF-8 (byte 1)"},
		{"lone continuation", "\x80", store.MaxIDBytes, "is not valid UTF-8 (byte 0)"},
		{"truncated", "ab\xe4\xb8", store.MaxIDBytes, "is not valid UTF-8 (byte 2)"},
		{"encoded surrogate", "\xed\xa0\x80", store.MaxIDBytes, "is not valid UTF-8 (byte 0)"},
		{"overlong nul", "\xc0\x80", store.MaxIDBytes, "is not valid UTF-8 (byte 0)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := store.CheckIDMax("items[3].key", tt.s, tt.max)
			if tt.reason == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, store.ErrInvalidID)
			var ie *store.InvalidIDError
			require.True(t, errors.As(err, &ie))
			require.Equal(t, "items[3].key", ie.Field)
			require.Equal(t, tt.reason, ie.Reason)
			require.Equal(t, "store: invalid identifier: items[3].key "+tt.reason, err.Error())
			require.Equal(t, tt.s == "", errors.Is(err, store.ErrEmptyKey))
		})
	}
}

func TestCheckIDKinds(t *testing.T) {
	t.Parallel()
	err := store.CheckHolder("w\x00")
	require.ErrorIs(t, err, store.ErrInvalidLease)
	require.ErrorIs(t, err, store.ErrInvalidID)
	require.EqualError(t, err, "store: invalid lease: holder contains control character U+0000 at byte 1")

	ev := store.SlotEvent{EventID: "e\xff"}
	err = ev.Check()
	require.ErrorIs(t, err, store.ErrInvalidEvent)
	require.ErrorIs(t, err, store.ErrInvalidID)

	c := store.SlotConfig{Name: "c\n"}
	err = c.Validate()
	require.ErrorIs(t, err, store.ErrInvalidSlotConfig)
	require.ErrorIs(t, err, store.ErrInvalidID)

	err = store.CheckLeaseKey("p", strings.Repeat("k", store.MaxIDBytes+1))
	require.ErrorIs(t, err, store.ErrInvalidID)
	require.ErrorIs(t, store.CheckLeaseKey("", "k"), store.ErrEmptyKey)

	it := store.Item{Key: "k\x00", Limit: store.Limit{Name: "p", Rate: 1, Period: 1}}
	require.ErrorIs(t, it.Check(), store.ErrInvalidID)
	it = store.Item{Key: "k", Limit: store.Limit{Name: "p\x00", Rate: 1, Period: 1}}
	require.ErrorIs(t, it.Check(), store.ErrInvalidID)
}

func TestCheckIDAllocs(t *testing.T) {
	key := "tenant:42:GET /v1/orders/é"
	n := testing.AllocsPerRun(100, func() {
		if store.CheckKey(key) != nil {
			panic("invalid")
		}
	})
	require.Zero(t, n)
}

func FuzzCheckID(f *testing.F) {
	for _, s := range []string{"a", "", "a\x00b", "\xff", "\xed\xa0\x80", "é\u0085", "\u00a0", "\x7f", strings.Repeat("a", 513)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := store.CheckID("key", s)
		// The rule, stated independently: valid UTF-8, 1..MaxIDBytes bytes,
		// no rune in C0, DEL or C1.
		want := s != "" && len(s) <= store.MaxIDBytes && !strings.ContainsFunc(s, store.IsControl) && utf8Valid(s)
		if (err == nil) != want {
			t.Fatalf("CheckID(%q) = %v, want valid=%v", s, err, want)
		}
		if err != nil && !errors.Is(err, store.ErrInvalidID) {
			t.Fatalf("CheckID(%q) = %v, not ErrInvalidID", s, err)
		}
	})
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "") == s }
