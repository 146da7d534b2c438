package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
)

// RunLeases runs the lease conformance suite against the stores newStore
// returns (a new store per call or the same one every time). Like Run, it
// drives time only through Now, uses names unique to the run, and returns
// once every parallel subtest has finished.
func RunLeases(t *testing.T, newStore func(t *testing.T) store.LeaseStore) {
	t.Helper()
	run := fmt.Sprintf("%016x", rand.Uint64())
	tests := []struct {
		name string
		f    func(*leaseBundle)
	}{
		{"Permits", testLeasePermits},
		{"ReacquireBySameHolder", testLeaseReacquire},
		{"Expiry", testLeaseExpiry},
		{"Renew", testLeaseRenew},
		{"Release", testLeaseRelease},
		{"FencedWrite", testFencedWrite},
		{"Errors", testLeaseErrors},
		{"ConcurrentAcquire", testLeaseConcurrent},
		{"Fencing", testLeaseFencing},
		{"Watch", testLeaseWatch},
		{"TakeAllAcquire", testTakeAllAcquire},
		{"Linearizable", testLeaseLinearizable},
	}
	t.Run("LeaseStore", func(t *testing.T) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.f(&leaseBundle{t: t, s: newStore(t), ctx: context.Background(), name: "storetest/" + run + "/" + t.Name()})
			})
		}
	})
}

type leaseBundle struct {
	t    *testing.T
	s    store.LeaseStore
	ctx  context.Context
	name string
}

func (b *leaseBundle) acquire(key, holder string, permits int64, ttl time.Duration, now time.Time) store.AcquireResult {
	b.t.Helper()
	res, err := b.s.Acquire(b.ctx, store.AcquireParams{Name: b.name, Key: key, Holder: holder, Permits: permits, TTL: ttl, Now: now})
	require.NoError(b.t, err, "acquire %s by %s at %v", key, holder, now.Sub(base))
	return res
}

func (b *leaseBundle) holders(key string, now time.Time) []store.Lease {
	b.t.Helper()
	hs, err := b.s.Holders(b.ctx, store.HoldersParams{Name: b.name, Key: key, Now: now})
	require.NoError(b.t, err)
	return hs
}

func (b *leaseBundle) release(l store.Lease, now time.Time) error {
	return b.s.Release(b.ctx, store.ReleaseParams{Name: l.Name, Key: l.Key, Holder: l.Holder, Token: l.Token, Now: now})
}

func (b *leaseBundle) write(l store.Lease, field, value string, now time.Time) error {
	return b.s.FencedWrite(b.ctx, store.FencedWriteParams{Name: l.Name, Key: l.Key, Token: l.Token, Field: field, Value: []byte(value), Now: now})
}

func holderNames(ls []store.Lease) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.Holder
	}
	return out
}

func testLeasePermits(b *leaseBundle) {
	t := b.t
	now := at(0)
	var last int64
	for i, h := range []string{"a", "b", "c"} {
		r := b.acquire("k", h, 3, 10*time.Second, now.Add(time.Duration(i)*time.Second))
		require.True(t, r.Acquired, h)
		require.Greater(t, r.Lease.Token, last, "tokens strictly increase")
		last = r.Lease.Token
		require.Equal(t, int64(i+1), r.Held)
		require.Equal(t, h, r.Lease.Holder)
		require.Equal(t, b.name, r.Lease.Name)
		require.Equal(t, "k", r.Lease.Key)
		require.Equal(t, now.Add(time.Duration(i)*time.Second+10*time.Second).UnixMicro(), r.Lease.Expires)
		require.Equal(t, now.Add(time.Duration(i)*time.Second).UnixMicro(), r.At)
	}
	r := b.acquire("k", "d", 3, 10*time.Second, at(4*time.Second))
	require.False(t, r.Acquired)
	require.Equal(t, int64(3), r.Held)
	require.Equal(t, 6*time.Second, r.RetryAfter, "until a's lease ends")
	require.Equal(t, []string{"a", "b", "c"}, holderNames(b.holders("k", at(4*time.Second))))
	// Another key has permits of its own.
	require.True(t, b.acquire("other", "d", 1, time.Second, at(4*time.Second)).Acquired)
	// More permits asked for: one more holder fits.
	require.True(t, b.acquire("k", "d", 4, 10*time.Second, at(4*time.Second)).Acquired)
	// Fewer: nobody new until enough have left.
	require.False(t, b.acquire("k", "e", 2, 10*time.Second, at(5*time.Second)).Acquired)
}

func testLeaseReacquire(b *leaseBundle) {
	t := b.t
	r1 := b.acquire("k", "a", 1, 2*time.Second, at(0))
	require.True(t, r1.Acquired)
	require.False(t, r1.Renewed)
	r2 := b.acquire("k", "a", 1, 2*time.Second, at(time.Second))
	require.True(t, r2.Acquired, "a holder asking again gets its permit back")
	require.True(t, r2.Renewed)
	require.Equal(t, r1.Lease.Token, r2.Lease.Token)
	require.Equal(t, at(3*time.Second).UnixMicro(), r2.Lease.Expires, "renewed")
	require.Len(t, b.holders("k", at(time.Second)), 1)
}

func testLeaseExpiry(b *leaseBundle) {
	t := b.t
	r1 := b.acquire("k", "a", 1, 2*time.Second, at(0))
	require.True(t, r1.Acquired)
	r := b.acquire("k", "b", 1, 2*time.Second, at(2*time.Second-us))
	require.False(t, r.Acquired)
	require.Equal(t, us, r.RetryAfter)
	require.Len(t, b.holders("k", at(2*time.Second-us)), 1)
	require.Empty(t, b.holders("k", at(2*time.Second)), "a lease ends at its expiry")
	r2 := b.acquire("k", "b", 1, 2*time.Second, at(2*time.Second))
	require.True(t, r2.Acquired)
	require.Greater(t, r2.Lease.Token, r1.Lease.Token)
	// The expired holder asking again is a new holder with a new token.
	r3 := b.acquire("k", "a", 1, 2*time.Second, at(5*time.Second))
	require.True(t, r3.Acquired)
	require.Greater(t, r3.Lease.Token, r2.Lease.Token)
}

func testLeaseRenew(b *leaseBundle) {
	t := b.t
	l := b.acquire("k", "a", 1, 2*time.Second, at(0)).Lease
	renew := func(holder string, token int64, ttl time.Duration, now time.Time) (store.Lease, error) {
		return b.s.Renew(b.ctx, store.RenewParams{Name: b.name, Key: "k", Holder: holder, Token: token, TTL: ttl, Now: now})
	}
	got, err := renew("a", l.Token, 5*time.Second, at(time.Second))
	require.NoError(t, err)
	require.Equal(t, l.Token, got.Token)
	require.Equal(t, at(6*time.Second).UnixMicro(), got.Expires)
	require.False(t, b.acquire("k", "b", 1, time.Second, at(5*time.Second)).Acquired, "renewed past 2s")
	_, err = renew("b", l.Token, time.Second, at(2*time.Second))
	require.ErrorIs(t, err, store.ErrLeaseNotHeld, "another holder")
	_, err = renew("a", l.Token+1, time.Second, at(2*time.Second))
	require.ErrorIs(t, err, store.ErrLeaseNotHeld, "another token")
	_, err = renew("a", l.Token, time.Second, at(6*time.Second))
	require.ErrorIs(t, err, store.ErrLeaseNotHeld, "expired")
	_, err = b.s.Renew(b.ctx, store.RenewParams{Name: b.name, Key: "never", Holder: "a", Token: 1, TTL: time.Second, Now: at(0)})
	require.ErrorIs(t, err, store.ErrLeaseNotHeld, "never held")
	require.Empty(t, b.holders("k", at(6*time.Second)), "a failed renew revives nothing")
}

func testLeaseRelease(b *leaseBundle) {
	t := b.t
	a := b.acquire("k", "a", 1, 2*time.Second, at(0)).Lease
	require.NoError(t, b.release(a, at(time.Second)))
	require.ErrorIs(t, b.release(a, at(time.Second)), store.ErrLeaseNotHeld, "twice")
	bl := b.acquire("k", "b", 1, 2*time.Second, at(time.Second)).Lease
	require.Greater(t, bl.Token, a.Token)
	// a's stale release, even naming b's token or b naming a's, frees nothing.
	require.ErrorIs(t, b.release(a, at(time.Second)), store.ErrLeaseNotHeld)
	require.ErrorIs(t, b.release(store.Lease{Name: b.name, Key: "k", Holder: "a", Token: bl.Token}, at(time.Second)), store.ErrLeaseNotHeld)
	require.ErrorIs(t, b.release(store.Lease{Name: b.name, Key: "k", Holder: "b", Token: a.Token}, at(time.Second)), store.ErrLeaseNotHeld)
	require.Equal(t, []string{"b"}, holderNames(b.holders("k", at(time.Second))))
	require.NoError(t, b.release(bl, at(time.Second)))
	require.Empty(t, b.holders("k", at(time.Second)))
}

func testFencedWrite(b *leaseBundle) {
	t := b.t
	read := func(field string) (store.FencedValue, bool) {
		v, ok, err := b.s.FencedRead(b.ctx, store.FencedReadParams{Name: b.name, Key: "k", Field: field})
		require.NoError(t, err)
		return v, ok
	}
	_, ok := read("cursor")
	require.False(t, ok)
	a := b.acquire("k", "a", 2, 2*time.Second, at(0)).Lease
	require.NoError(t, b.write(a, "cursor", "a1", at(time.Second)))
	v, ok := read("cursor")
	require.True(t, ok)
	require.Equal(t, store.FencedValue{Value: []byte("a1"), Token: a.Token}, v)
	c := b.acquire("k", "c", 2, 2*time.Second, at(time.Second)).Lease
	require.NoError(t, b.write(c, "cursor", "c1", at(time.Second)))
	require.ErrorIs(t, b.write(a, "cursor", "a2", at(time.Second)), store.ErrStaleToken, "an older token after a newer wrote")
	require.NoError(t, b.write(a, "other", "a3", at(time.Second)), "fields are fenced one by one")
	require.ErrorIs(t, b.write(a, "other", "a4", at(2*time.Second)), store.ErrStaleToken, "expired")
	require.ErrorIs(t, b.write(store.Lease{Name: b.name, Key: "k", Token: c.Token + 1000}, "cursor", "x", at(time.Second)), store.ErrStaleToken, "a token never issued")
	require.NoError(t, b.release(c, at(time.Second+us)))
	require.ErrorIs(t, b.write(c, "cursor", "c2", at(time.Second+us)), store.ErrStaleToken, "released")
	v, _ = read("cursor")
	require.Equal(t, "c1", string(v.Value))
	require.Equal(t, c.Token, v.Token)
	v, _ = read("other")
	require.Equal(t, "a3", string(v.Value))
	// Empty values are values.
	d := b.acquire("k", "d", 2, 2*time.Second, at(3*time.Second)).Lease
	require.NoError(t, b.write(d, "cursor", "", at(3*time.Second)))
	v, ok = read("cursor")
	require.True(t, ok)
	require.Empty(t, v.Value)
}

func testLeaseErrors(b *leaseBundle) {
	t := b.t
	ok := store.AcquireParams{Name: b.name, Key: "k", Holder: "h", Permits: 1, TTL: time.Second, Now: at(0)}
	for _, tc := range []struct {
		name string
		edit func(*store.AcquireParams)
		want error
	}{
		{"no name", func(p *store.AcquireParams) { p.Name = "" }, store.ErrEmptyKey},
		{"no key", func(p *store.AcquireParams) { p.Key = "" }, store.ErrEmptyKey},
		{"no holder", func(p *store.AcquireParams) { p.Holder = "" }, store.ErrInvalidLease},
		{"long holder", func(p *store.AcquireParams) { p.Holder = string(make([]byte, store.MaxHolderLen+1)) }, store.ErrInvalidLease},
		{"NUL in holder", func(p *store.AcquireParams) { p.Holder = "a\x00b" }, store.ErrInvalidLease},
		{"holder not UTF-8", func(p *store.AcquireParams) { p.Holder = "a\xffb" }, store.ErrInvalidLease},
		{"zero permits", func(p *store.AcquireParams) { p.Permits = 0 }, store.ErrInvalidLease},
		{"too many permits", func(p *store.AcquireParams) { p.Permits = store.MaxPermits + 1 }, store.ErrInvalidLease},
		{"zero ttl", func(p *store.AcquireParams) { p.TTL = 0 }, store.ErrInvalidLease},
		{"negative ttl", func(p *store.AcquireParams) { p.TTL = -time.Second }, store.ErrInvalidLease},
		{"huge ttl", func(p *store.AcquireParams) { p.TTL = store.MaxLeaseTTL + time.Second }, store.ErrInvalidLease},
		{"sub-microsecond ttl", func(p *store.AcquireParams) { p.TTL = time.Second + 1 }, store.ErrInvalidLease},
	} {
		p := ok
		tc.edit(&p)
		_, err := b.s.Acquire(b.ctx, p)
		require.ErrorIs(t, err, tc.want, tc.name)
	}
	require.Empty(t, b.holders("k", at(0)), "no failed acquire took a permit")
	_, err := b.s.Renew(b.ctx, store.RenewParams{Name: b.name, Key: "k", Holder: "h", Token: 1, TTL: 0})
	require.ErrorIs(t, err, store.ErrInvalidLease)
	require.ErrorIs(t, b.s.Release(b.ctx, store.ReleaseParams{Name: b.name, Key: "", Holder: "h"}), store.ErrEmptyKey)
	require.ErrorIs(t, b.s.FencedWrite(b.ctx, store.FencedWriteParams{Name: b.name, Key: "k", Token: 1}), store.ErrInvalidLease, "no field")
	require.ErrorIs(t, b.s.FencedWrite(b.ctx, store.FencedWriteParams{Name: b.name, Key: "k", Token: 1, Field: "f", Value: make([]byte, store.MaxFencedValue+1)}), store.ErrInvalidLease)
	_, err = b.s.Holders(b.ctx, store.HoldersParams{Name: b.name})
	require.ErrorIs(t, err, store.ErrEmptyKey)

	// Keys, names and holders that break the identifier rule.
	for _, bad := range HostileIDs() {
		for _, edit := range []func(*store.AcquireParams){
			func(p *store.AcquireParams) { p.Key = bad },
			func(p *store.AcquireParams) { p.Name = bad },
			func(p *store.AcquireParams) { p.Holder = bad },
		} {
			p := ok
			edit(&p)
			_, err := b.s.Acquire(b.ctx, p)
			require.ErrorIs(t, err, store.ErrInvalidID, "%q", bad)
			_, err = b.s.Renew(b.ctx, store.RenewParams{Name: p.Name, Key: p.Key, Holder: p.Holder, Token: 1, TTL: time.Second})
			require.ErrorIs(t, err, store.ErrInvalidID, "%q", bad)
			err = b.s.Release(b.ctx, store.ReleaseParams{Name: p.Name, Key: p.Key, Holder: p.Holder, Token: 1})
			require.ErrorIs(t, err, store.ErrInvalidID, "%q", bad)
		}
		_, err := b.s.Holders(b.ctx, store.HoldersParams{Name: b.name, Key: bad})
		require.ErrorIs(t, err, store.ErrInvalidID, "%q", bad)
		_, _, err = b.s.FencedRead(b.ctx, store.FencedReadParams{Name: b.name, Key: bad})
		require.ErrorIs(t, err, store.ErrInvalidID, "%q", bad)
	}
	require.Empty(t, b.holders("k", at(0)), "no hostile acquire took a permit")
}

func testLeaseConcurrent(b *leaseBundle) {
	t := b.t
	const workers, permits = 16, 3
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		got []store.Lease
	)
	for w := range workers {
		wg.Go(func() {
			res, err := b.s.Acquire(b.ctx, store.AcquireParams{Name: b.name, Key: "k", Holder: fmt.Sprint("w", w), Permits: permits, TTL: time.Minute, Now: at(0)})
			if err != nil {
				t.Error(err)
				return
			}
			if res.Acquired {
				mu.Lock()
				got = append(got, res.Lease)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, got, permits, "exactly N of many concurrent acquirers")
	seen := map[int64]bool{}
	for _, l := range got {
		require.False(t, seen[l.Token], "tokens are unique")
		seen[l.Token] = true
	}
	require.Len(t, b.holders("k", at(time.Second)), permits)
}

// testLeaseFencing is the fencing test. Each round: holder A takes
// the one permit with a TTL of 2 s and is frozen for 5 s (the store clock
// moves on through Now); B acquires and writes; A resumes and tries to
// write and release, in a random order relative to B's later writes.
// Several keys run side by side, each driven by one goroutine, so every
// key's history is sequential; checkFencing replays the recorded history
// against the reference model (store.LeaseState) and checks the
// invariants: no stale write accepted, tokens strictly increasing per key,
// the successor's permit never freed by the stale holder.
func testLeaseFencing(b *leaseBundle) {
	const keys, rounds = 10, 100 // 1,000 rounds in all
	var wg sync.WaitGroup
	hists := make([][]fenceEvent, keys)
	for k := range keys {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(k), 42))
			hists[k] = fencingRounds(b, fmt.Sprint("fence-", k), rounds, rng)
		})
	}
	wg.Wait()
	if b.t.Failed() {
		return
	}
	total, staleWrites, staleReleases := 0, 0, 0
	for k, h := range hists {
		require.NoError(b.t, checkFencing(h), "key %d", k)
		total += len(h)
		for i, e := range h {
			// A's operations after B's acquire are the stale ones.
			if e.holder == "A" && e.op != "acquire" && i > 0 && h[i-1].op != "acquire" {
				switch e.op {
				case "write":
					staleWrites++
				case "release":
					staleReleases++
				}
			}
		}
	}
	require.Greater(b.t, total, keys*rounds*5)
	require.Equal(b.t, keys*rounds, staleWrites)
	require.Equal(b.t, keys*rounds, staleReleases)
	b.t.Logf("%d rounds, %d operations checked: %d stale writes and %d stale releases tried, none accepted",
		keys*rounds, total, staleWrites, staleReleases)
}

// fenceEvent is one operation of the fencing test and what the store said.
type fenceEvent struct {
	op     string // acquire, write, release, holders
	holder string
	token  int64 // the token the operation named (acquire: the one granted)
	now    int64
	ok     bool    // acquired, written, released
	err    error   // for write and release: nil, ErrStaleToken or ErrLeaseNotHeld
	held   []int64 // holders: the tokens listed
	key    string
}

func fencingRounds(b *leaseBundle, key string, rounds int, rng *rand.Rand) []fenceEvent {
	var h []fenceEvent
	const ttl = 2 * time.Second
	rec := func(e fenceEvent) fenceEvent { e.key = key; h = append(h, e); return e }
	for r := range rounds {
		t0 := at(time.Duration(r) * 10 * time.Second)
		ra, err := b.s.Acquire(b.ctx, store.AcquireParams{Name: b.name, Key: key, Holder: "A", Permits: 1, TTL: ttl, Now: t0})
		if err != nil {
			b.t.Error(err)
			return h
		}
		a := rec(fenceEvent{op: "acquire", holder: "A", token: ra.Lease.Token, now: t0.UnixMicro(), ok: ra.Acquired})
		// A writes while it holds the lease, then freezes for 5 s.
		werr := b.write(ra.Lease, "data", fmt.Sprint("A", r), t0.Add(time.Second))
		rec(fenceEvent{op: "write", holder: "A", token: a.token, now: t0.Add(time.Second).UnixMicro(), ok: werr == nil, err: werr})
		t5 := t0.Add(5 * time.Second)
		rb, err := b.s.Acquire(b.ctx, store.AcquireParams{Name: b.name, Key: key, Holder: "B", Permits: 1, TTL: ttl, Now: t5})
		if err != nil {
			b.t.Error(err)
			return h
		}
		bb := rec(fenceEvent{op: "acquire", holder: "B", token: rb.Lease.Token, now: t5.UnixMicro(), ok: rb.Acquired})
		werr = b.write(rb.Lease, "data", fmt.Sprint("B", r), t5)
		rec(fenceEvent{op: "write", holder: "B", token: bb.token, now: t5.UnixMicro(), ok: werr == nil, err: werr})
		// A resumes: its write and its release, and another write of B's,
		// in a random order, all within B's TTL.
		steps := []func(now time.Time){
			func(now time.Time) {
				err := b.write(ra.Lease, "data", fmt.Sprint("A-stale", r), now)
				rec(fenceEvent{op: "write", holder: "A", token: a.token, now: now.UnixMicro(), ok: err == nil, err: err})
			},
			func(now time.Time) {
				err := b.release(ra.Lease, now)
				rec(fenceEvent{op: "release", holder: "A", token: a.token, now: now.UnixMicro(), ok: err == nil, err: err})
			},
			func(now time.Time) {
				err := b.write(rb.Lease, "data", fmt.Sprint("B2-", r), now)
				rec(fenceEvent{op: "write", holder: "B", token: bb.token, now: now.UnixMicro(), ok: err == nil, err: err})
			},
		}
		rng.Shuffle(len(steps), func(i, j int) { steps[i], steps[j] = steps[j], steps[i] })
		for i, f := range steps {
			f(t5.Add(time.Duration(i+1) * 100 * time.Millisecond))
		}
		tl := t5.Add(time.Second)
		hs, err := b.s.Holders(b.ctx, store.HoldersParams{Name: b.name, Key: key, Now: tl})
		if err != nil {
			b.t.Error(err)
			return h
		}
		ev := fenceEvent{op: "holders", now: tl.UnixMicro()}
		for _, l := range hs {
			ev.held = append(ev.held, l.Token)
		}
		rec(ev)
		if rng.IntN(2) == 0 {
			err := b.release(rb.Lease, tl)
			rec(fenceEvent{op: "release", holder: "B", token: bb.token, now: tl.UnixMicro(), ok: err == nil, err: err})
		} // else B's lease runs out by the next round
	}
	return h
}

// checkFencing replays one key's sequential history against the reference
// model and checks the fencing invariants.
func checkFencing(h []fenceEvent) error {
	var (
		model     store.LeaseState
		lastToken int64
		lastWrite = map[string]int64{} // field -> token of the accepted write
		issued    int64
	)
	next := func() (int64, error) { issued++; return issued, nil }
	for i, e := range h {
		switch e.op {
		case "acquire":
			// The model grants what the store may; the store's token is
			// checked for order only (backends number tokens their own way).
			res, _ := model.Acquire(e.now, &store.AcquireParams{Name: "m", Key: e.key, Holder: e.holder, Permits: 1, TTL: 2 * time.Second}, next)
			if res.Acquired != e.ok {
				return fmt.Errorf("event %d %+v: store acquired=%v, model %v", i, e, e.ok, res.Acquired)
			}
			if !e.ok {
				continue
			}
			model.Holders[len(model.Holders)-1].Token = e.token
			if e.token <= lastToken {
				return fmt.Errorf("event %d: token %d after %d: not strictly increasing", i, e.token, lastToken)
			}
			lastToken = e.token
		case "write":
			want := model.Holds(e.now, e.token) && lastWrite["data"] <= e.token
			if e.ok && !want {
				return fmt.Errorf("event %d %+v: a stale write was accepted", i, e)
			}
			if !e.ok && want {
				return fmt.Errorf("event %d %+v: a fenced write by the holder was refused: %v", i, e, e.err)
			}
			if !e.ok && e.err != store.ErrStaleToken {
				return fmt.Errorf("event %d %+v: refused with %v, want store.ErrStaleToken", i, e, e.err)
			}
			if e.ok {
				lastWrite["data"] = e.token
			}
		case "release":
			err := model.Release(e.now, &store.ReleaseParams{Holder: e.holder, Token: e.token})
			if (err == nil) != e.ok {
				return fmt.Errorf("event %d %+v: store released=%v, model %v", i, e, e.ok, err == nil)
			}
			if !e.ok && e.err != store.ErrLeaseNotHeld {
				return fmt.Errorf("event %d %+v: refused with %v, want store.ErrLeaseNotHeld", i, e, e.err)
			}
		case "holders":
			var want []int64
			for _, l := range model.Live(e.now) {
				want = append(want, l.Token)
			}
			if fmt.Sprint(want) != fmt.Sprint(e.held) {
				return fmt.Errorf("event %d: holders %v, model %v (a successor's permit freed?)", i, e.held, want)
			}
		}
	}
	return nil
}

func testLeaseWatch(b *leaseBundle) {
	t := b.t
	w, ok := b.s.(store.LeaseWatcher)
	if !ok {
		t.Skip("the store announces no releases: waiters back off instead")
	}
	ch, stop, err := w.WatchLease(b.ctx, b.name, "k")
	require.NoError(t, err)
	defer stop()
	other, stopOther, err := w.WatchLease(b.ctx, b.name, "other")
	require.NoError(t, err)
	defer stopOther()
	// Real time: a backend's notifications carry no Now. A waiter is
	// refused, then the holder releases.
	l := b.acquire("k", "a", 1, time.Minute, time.Time{}).Lease
	require.False(t, b.acquire("k", "b", 1, time.Minute, time.Time{}).Acquired)
	require.NoError(t, b.release(l, time.Time{}))
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up 10 s after a release")
	}
	select {
	case <-other:
		// Allowed (spurious) but worth knowing when it happens always.
		t.Log("a release of k woke a watcher of other")
	default:
	}
	stop()
	stop() // idempotent
}

// testTakeAllAcquire checks the all-or-nothing mix of rate items and a
// lease, on stores that offer it.
func testTakeAllAcquire(b *leaseBundle) {
	t := b.t
	s, ok := b.s.(store.RateLeaseStore)
	if !ok {
		t.Skip("the store takes rates and leases apart")
	}
	lim := store.Limit{Name: b.name + "/rate", Rate: 2, Period: time.Second, Burst: 2}
	call := func(holder string, cost int64, now time.Time) store.TakeAllAcquireResult {
		t.Helper()
		res, err := s.TakeAllAcquire(b.ctx, store.TakeAllAcquireParams{
			Items: []store.Item{{Key: "k", Limit: lim, Cost: cost}},
			Lease: store.AcquireParams{Name: b.name, Key: "k", Holder: holder, Permits: 1, TTL: time.Minute},
			Now:   now,
		})
		require.NoError(t, err)
		require.Len(t, res.Rates.Results, 1)
		return res
	}
	now := at(0)
	r := call("a", 1, now)
	require.True(t, r.Allowed)
	require.True(t, r.Lease.Acquired)
	require.Equal(t, int64(1), r.Rates.Results[0].Remaining)
	a := r.Lease.Lease

	r = call("b", 1, now)
	require.False(t, r.Allowed, "the permit is taken")
	require.False(t, r.Lease.Acquired)
	require.Equal(t, time.Minute, r.Lease.RetryAfter)
	require.Equal(t, int64(1), r.Rates.Results[0].Remaining, "nothing charged")
	require.Equal(t, []string{"a"}, holderNames(b.holders("k", now)))

	require.NoError(t, b.release(a, now))
	r = call("b", 2, now)
	require.False(t, r.Allowed, "the rate refuses")
	require.False(t, r.Lease.Acquired)
	require.False(t, r.Rates.Results[0].Allowed)
	require.Empty(t, b.holders("k", now), "no lease taken")
	res, err := b.s.(store.RateStore).Take(b.ctx, store.TakeParams{Key: "k", Limit: lim, Now: now})
	require.NoError(t, err)
	require.Equal(t, int64(1), res.Remaining, "nothing charged")

	r = call("b", 1, now)
	require.True(t, r.Allowed)
	require.Greater(t, r.Lease.Lease.Token, a.Token)
	require.Equal(t, int64(0), r.Rates.Results[0].Remaining)

	_, err = s.TakeAllAcquire(b.ctx, store.TakeAllAcquireParams{
		Items: []store.Item{{Key: "k", Limit: lim, Cost: 3}},
		Lease: store.AcquireParams{Name: b.name, Key: "k2", Holder: "c", Permits: 1, TTL: time.Minute},
	})
	require.ErrorIs(t, err, store.ErrCostExceedsLimit)
	require.Empty(t, b.holders("k2", now))

	// A charge followed on the same row by a peek of the same name under
	// another algorithm (a policy reload): the peek changes nothing, so the
	// charge's limit says whether the row is fresh, and the charge stays.
	g := store.Limit{Name: b.name + "/reloaded", Rate: 8, Period: time.Second, Burst: 4}
	fixed := store.Limit{Name: g.Name, Algorithm: store.FixedWindow, Rate: 6, Period: 700 * time.Millisecond}
	for i, before := range []int64{0, 1} {
		key := fmt.Sprintf("reloaded-%d", i)
		if before > 0 {
			_, err := b.s.(store.RateStore).Take(b.ctx, store.TakeParams{Key: key, Limit: g, Cost: before, Now: now})
			require.NoError(t, err)
		}
		r, err := s.TakeAllAcquire(b.ctx, store.TakeAllAcquireParams{
			Items: []store.Item{{Key: key, Limit: g, Cost: 3}, {Key: key, Limit: fixed, Cost: 0}},
			Lease: store.AcquireParams{Name: b.name, Key: key, Holder: "d", Permits: 1, TTL: time.Minute},
			Now:   now,
		})
		require.NoError(t, err)
		require.True(t, r.Allowed)
		res, err := b.s.(store.RateStore).Take(b.ctx, store.TakeParams{Key: key, Limit: g, Now: now})
		require.NoError(t, err)
		require.Equal(t, 4-3-before, res.Remaining, "%d taken before: the charge was kept", before)
	}
}

// LeaseAcrossStores has goroutines on every store (several Store values on
// one backend, as several processes would have) take turns on one permit
// of one key, on the backend's own clock, and checks that the grants never
// overlap and their tokens strictly increase in the order granted.
func LeaseAcrossStores(t *testing.T, stores ...store.LeaseStore) {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("storetest/across/%016x", rand.Uint64())
	const perStore, turns = 3, 20
	var (
		mu     sync.Mutex
		held   bool
		tokens []int64
		wg     sync.WaitGroup
	)
	for si, s := range stores {
		for g := range perStore {
			wg.Go(func() {
				holder := fmt.Sprintf("s%d-g%d", si, g)
				for got := 0; got < turns; {
					res, err := s.Acquire(ctx, store.AcquireParams{Name: name, Key: "k", Holder: holder, Permits: 1, TTL: time.Minute})
					if err != nil {
						t.Error(err)
						return
					}
					if !res.Acquired {
						runtime.Gosched()
						continue
					}
					mu.Lock()
					if held {
						t.Errorf("%s holds the permit while another does", holder)
					}
					held = true
					tokens = append(tokens, res.Lease.Token)
					mu.Unlock()
					runtime.Gosched() // hold it a moment
					mu.Lock()
					held = false
					mu.Unlock()
					if err := s.Release(ctx, store.ReleaseParams{Name: name, Key: "k", Holder: holder, Token: res.Lease.Token}); err != nil {
						t.Error(err)
						return
					}
					got++
				}
			})
		}
	}
	wg.Wait()
	require.Len(t, tokens, len(stores)*perStore*turns)
	for i := 1; i < len(tokens); i++ {
		require.Greater(t, tokens[i], tokens[i-1], "grant %d", i)
	}
}
