package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
)

// reply returns a reply of integers, as go-redis reads a script's array.
func reply(n ...int64) []any {
	v := make([]any, len(n))
	for i, x := range n {
		v[i] = x
	}
	return v
}

// TestDecode reads every reply layout of rate.lua, and replies of the wrong
// type, length or value, which are errors, never panics.
func TestDecode(t *testing.T) {
	t.Parallel()
	it := func(allowed bool, remaining, reset, retry, delay int64) item {
		return item{allowed: allowed, remaining: remaining, resetAfter: reset, retryAfter: retry, delay: delay}
	}
	for _, tc := range []struct {
		name  string
		op    string
		raw   any
		items int
		now   int64
		all   bool
		want  []item
		err   error // matched with errors.Is
	}{
		// 'g': {now, item}, trailing zeros left out.
		{name: "g allowed", op: opTake, raw: reply(7, 1, 8, 200), items: 1, now: 7, want: []item{it(true, 8, 200, 0, 0)}},
		{name: "g denied", op: opTake, raw: reply(7, 0, 0, 900, 30), items: 1, now: 7, want: []item{it(false, 0, 900, 30, 0)}},
		{name: "g delayed", op: opTake, raw: reply(7, 1, 0, 1100, 0, 100), items: 1, now: 7, want: []item{it(true, 0, 1100, 0, 100)}},
		{name: "g out of range", op: opTake, raw: reply(7, -2), items: 1, err: ErrOutOfRange},
		{name: "g too short", op: opTake, raw: reply(7, 1, 8), items: 1, err: errReply},
		{name: "g two numbers, no failure", op: opTake, raw: reply(7, 1), items: 1, err: errReply},
		{name: "g empty", op: opTake, raw: reply(), items: 1, err: errReply},
		{name: "g too long", op: opTake, raw: reply(7, 1, 1, 8, 0, 200, 0), items: 1, err: errReply},
		{name: "g unknown allowed", op: opTake, raw: reply(7, -3, 0, 0), items: 1, err: errReply},
		{name: "g allowed 2", op: opTake, raw: reply(7, 2, 0, 0), items: 1, err: errReply},
		{name: "g failure code in a full item", op: opTake, raw: reply(7, -2, 0, 0, 0, 0), items: 1, err: errReply},
		{name: "g unknown failure", op: opTake, raw: reply(7, -3), items: 1, err: errReply},
		{name: "g string element", op: opTake, raw: []any{int64(7), int64(1), "8", int64(200)}, items: 1, err: errReply},
		{name: "g nil element", op: opTake, raw: []any{int64(7), int64(1), int64(8), nil}, items: 1, err: errReply},
		{name: "g string now", op: opTake, raw: []any{"7", int64(1), int64(8), int64(200)}, items: 1, err: errReply},
		{name: "g failure with a string now", op: opTake, raw: []any{"7", int64(-2)}, items: 1, err: errReply},
		{name: "g not an array", op: opTake, raw: int64(1), items: 1, err: errReply},
		{name: "g a string", op: opTake, raw: "OK", items: 1, err: errReply},
		{name: "g nil", op: opTake, raw: nil, items: 1, err: errReply},

		// 't': {now, all, item...}.
		{name: "t one", op: opTakeAll, raw: reply(7, 1, 1, 8, 200, 0, 0), items: 1, now: 7, all: true, want: []item{it(true, 8, 200, 0, 0)}},
		{name: "t two, one denied", op: opTakeAll, raw: reply(7, 0, 1, 8, 200, 0, 0, 0, 0, 900, 30, 0), items: 2, now: 7,
			want: []item{it(true, 8, 200, 0, 0), it(false, 0, 900, 30, 0)}},
		{name: "t none", op: opTakeAll, raw: reply(7, 1), items: 0, now: 7, all: true, want: []item{}},
		{name: "t out of range", op: opTakeAll, raw: reply(7, -2), items: 3, err: ErrOutOfRange},
		{name: "t cost exceeds limit", op: opTakeAll, raw: reply(7, -1), items: 1, err: store.ErrCostExceedsLimit},
		{name: "t short", op: opTakeAll, raw: reply(7, 1, 8, 200), items: 1, err: errReply},
		{name: "t an item short", op: opTakeAll, raw: reply(7, 1, 1, 8, 200, 0, 0, 1, 8, 200, 0), items: 2, err: errReply},
		{name: "t all is 2", op: opTakeAll, raw: reply(7, 2, 1, 8, 200, 0, 0), items: 1, err: errReply},
		{name: "t failure code in an item", op: opTakeAll, raw: reply(7, 0, -2, 0, 0, 0, 0), items: 1, err: errReply},
		{name: "t float element", op: opTakeAll, raw: []any{int64(7), int64(1), int64(1), 8.5, int64(200), int64(0), int64(0)}, items: 1, err: errReply},

		// 'b': {server now, item...}; a failure is the item's.
		{name: "b two", op: opBatch, raw: reply(7, 1, 8, 200, 0, 0, 0, 0, 900, 30, 0), items: 2, now: 7,
			want: []item{it(true, 8, 200, 0, 0), it(false, 0, 900, 30, 0)}},
		{name: "b server clock unread", op: opBatch, raw: reply(0, 1, 8, 200, 0, 5), items: 1, now: 0, want: []item{it(true, 8, 200, 0, 5)}},
		{name: "b a take out of range", op: opBatch, raw: reply(7, 1, 8, 200, 0, 0, -2, 0, 0, 0, 0), items: 2, now: 7,
			want: []item{it(true, 8, 200, 0, 0), {err: ErrOutOfRange}}},
		{name: "b only a failure", op: opBatch, raw: reply(7, -2), items: 1, err: errReply},
		{name: "b short", op: opBatch, raw: reply(7, 1, 8, 200, 0), items: 1, err: errReply},
		{name: "b long", op: opBatch, raw: reply(7, 1, 8, 200, 0, 0, 1, 8, 200, 0, 0), items: 1, err: errReply},
		{name: "b unknown code", op: opBatch, raw: reply(7, -5, 0, 0, 0, 0), items: 1, err: errReply},
		{name: "b bool element", op: opBatch, raw: []any{int64(7), true, int64(8), int64(200), int64(0), int64(0)}, items: 1, err: errReply},

		// 's' and 'y': {now, item}.
		{name: "s peek", op: opSettle, raw: reply(7, 1, 8, 200, 0, 0), items: 1, now: 7, want: []item{it(true, 8, 200, 0, 0)}},
		{name: "s cost exceeds limit", op: opSettle, raw: reply(7, -1), items: 1, err: store.ErrCostExceedsLimit},
		{name: "s out of range", op: opSettle, raw: reply(7, -2), items: 1, err: ErrOutOfRange},
		{name: "s trailing zeros left out", op: opSettle, raw: reply(7, 1, 8, 200), items: 1, err: errReply},
		{name: "y peek", op: opSync, raw: reply(7, 0, 0, 900, 30, 0), items: 1, now: 7, want: []item{it(false, 0, 900, 30, 0)}},
		{name: "y out of range", op: opSync, raw: reply(7, -2), items: 1, err: ErrOutOfRange},
		{name: "y long", op: opSync, raw: reply(7, 0, 0, 900, 30, 0, 0), items: 1, err: errReply},
		{name: "y unknown allowed", op: opSync, raw: reply(7, 9, 0, 900, 30, 0), items: 1, err: errReply},

		// 'r': an integer.
		{name: "r deleted", op: opReset, raw: int64(1), now: 0, want: []item{}},
		{name: "r nothing", op: opReset, raw: int64(0), now: 0, want: []item{}},
		{name: "r an array", op: opReset, raw: reply(1), err: errReply},
		{name: "r a string", op: opReset, raw: "1", err: errReply},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			items := make([]item, tc.items)
			now, all, err := decode(tc.op, tc.raw, items)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				require.Zero(t, now)
				require.False(t, all)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.now, now)
			require.Equal(t, tc.all, all)
			require.Equal(t, tc.want, items)
		})
	}
}

// TestDecodeMisuse: room for the wrong number of items, or an unknown
// operation, is an error too.
func TestDecodeMisuse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		op    string
		items int
	}{{opTake, 0}, {opTake, 2}, {opSettle, 0}, {opSync, 2}, {opReset, 1}, {"x", 1}, {"", 1}} {
		_, _, err := decode(tc.op, reply(7, 1, 8, 200, 0, 0), make([]item, tc.items))
		require.Error(t, err, "%q with %d items", tc.op, tc.items)
	}
}

// FuzzDecode feeds decode replies of any shape: it never panics, and what
// it accepts has the layout of its operation.
func FuzzDecode(f *testing.F) {
	f.Add(byte(0), byte(1), []byte{7, 1, 8, 200})
	f.Add(byte(1), byte(2), []byte{7, 0, 1, 8, 200, 0, 0, 0, 0, 9, 3, 0})
	f.Add(byte(2), byte(2), []byte{7, 1, 8, 200, 0, 0, 0xfe, 0, 0, 0, 0})
	f.Add(byte(3), byte(1), []byte{7, 0xff})
	f.Add(byte(5), byte(0), []byte{1})
	ops := []string{opTake, opTakeAll, opBatch, opSettle, opSync, opReset, "x"}
	f.Fuzz(func(t *testing.T, op, nitems byte, data []byte) {
		o := ops[int(op)%len(ops)]
		// Each byte is a number (signed, so that codes appear), except
		// that 0x80 makes a string and 0x81 a nil; a reset with one byte
		// gets the bare integer.
		var raw any
		v := make([]any, 0, len(data))
		for _, b := range data {
			switch b {
			case 0x80:
				v = append(v, string(rune(b)))
			case 0x81:
				v = append(v, nil)
			default:
				v = append(v, int64(int8(b)))
			}
		}
		raw = v
		if o == opReset && len(v) == 1 {
			raw = v[0]
		}
		items := make([]item, int(nitems)%5)
		now, all, err := decode(o, raw, items)
		if err != nil {
			require.Zero(t, now)
			require.False(t, all)
			return
		}
		if o == opReset {
			return
		}
		require.Equal(t, v[0], now)
		for i, it := range items {
			if it.err != nil {
				require.Equal(t, opBatch, o, "item %d: only a 'b' take fails alone", i)
				require.True(t, errors.Is(it.err, ErrOutOfRange) || errors.Is(it.err, store.ErrCostExceedsLimit))
			}
		}
	})
}

// TestWireLayouts calls the script directly with every operation's
// arguments and checks each reply's length against its layout: in
// particular the four numbers of an allowed 'g' take, which its hot path
// returns.
func TestWireLayouts(t *testing.T) {
	t.Parallel()
	c := single(t)
	s := newStore(t, c, Config{})
	ctx := context.Background()
	gcraL := store.Limit{Name: "g", Algorithm: store.GCRA, Rate: 10, Period: time.Second, Burst: 2}
	win := store.Limit{Name: "w", Algorithm: store.SlidingWindow, Rate: 10, Period: time.Second}
	run := func(r request) []any {
		t.Helper()
		v, err := rateScript.Run(ctx, c, r.keys, r.args...).Result()
		require.NoError(t, err)
		if r.op == opReset {
			require.IsType(t, int64(0), v)
			return nil
		}
		require.IsType(t, []any{}, v)
		return v.([]any)
	}
	takeReq := func(l store.Limit, cost int64, md time.Duration) request {
		t.Helper()
		r, err := s.takeRequest(&store.TakeParams{Key: "k", Limit: l, Cost: cost, MaxDelay: md})
		require.NoError(t, err)
		return r
	}
	require.Len(t, run(takeReq(gcraL, 1, 0)), 4, "'g' allowed")
	require.Len(t, run(takeReq(gcraL, 2, time.Second)), 6, "'g' delayed")
	require.Len(t, run(takeReq(gcraL, 1, 0)), 5, "'g' denied")
	require.Len(t, run(takeReq(win, 1, 0)), 2+5, "'t' of one key")

	b := request{op: opBatch, args: []any{opBatch, 0}}
	for _, l := range []store.Limit{gcraL, win, gcraL} {
		r := takeReq(l, 1, 0)
		b.keys = append(b.keys, r.keys[0])
		b.args = r.take.appendBatch(b.args, r.args)
	}
	require.Len(t, run(b), 1+3*5, "'b'")
	key, _ := rateKey(s.prefix, "k", win.Name)
	require.Len(t, run(settleRequest(key, 0, 2, int64(time.Second/time.Microsecond), 10, -1, 0, 10)), 6, "'s'")
	require.Len(t, run(syncRequest(key, 0, 2, int64(time.Second/time.Microsecond), 10, 3, 0)), 6, "'y'")
	run(resetRequest(key))
}

// TestAppendBatch: a take's 'b' arguments are the same whether they reuse
// its own call's arguments or box its numbers afresh.
func TestAppendBatch(t *testing.T) {
	t.Parallel()
	for _, tk := range []take{
		{x: 100, y: 10, cost: 1},
		{x: 100, y: 10, cost: 1, now: 1_700_000_000_000_000},
		{x: 100, y: 10, cost: 1, md: 5000},
		{x: 100, y: 10, cost: 1, now: 1_700_000_000_000_000, md: 5000},
		{alg: 1, x: 500000, y: 3, cost: 2},
		{alg: 2, x: 500000, y: 3, cost: 0, now: 1_700_000_000_000_000, md: 7},
	} {
		want := []any{opBatch, 0, tk.now, tk.md, tk.alg, tk.x, tk.y, tk.cost}
		require.Equal(t, want, tk.appendBatch([]any{opBatch, 0}, tk.args()), "%+v", tk)
		require.Equal(t, want, tk.appendBatch([]any{opBatch, 0}, nil), "%+v without its own arguments", tk)
	}
}
