package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluicerl/sluice/store"
)

// FuzzLeaseDifferential is the body of every backend's
// FuzzLeaseDifferential: it decodes each fuzz input into a sequence of lease
// operations (acquire, renew, release, holders, fenced write and read) over
// two keys and three holders, with valid and invalid permits (0, 1 to 3,
// MaxPermits and one more), TTLs (zero, negative, just under MinLeaseTTL,
// seconds, MaxLeaseTTL and one more), holders (empty, too long, not UTF-8),
// stale and unknown tokens, and a store-side Now that never runs backwards
// but may leap by years, and runs it against got and a fresh want (a
// memstore.NewLeases), failing at the first answer or error that differs.
// Tokens are compared through the per-key mapping the acquires establish,
// which must stay a bijection that preserves order, as in LeaseDifferential.
//
// Its seed corpus is this package's testdata/fuzz/FuzzLeaseDifferential,
// embedded.
func FuzzLeaseDifferential(f *testing.F, got func(t *testing.T) store.LeaseStore, want func() store.LeaseStore) {
	f.Helper()
	for _, seed := range corpusOf(f, "FuzzLeaseDifferential") {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		RunLeaseOps(t, got(t), want(), ops)
	})
}

var leaseErrors = []error{store.ErrLeaseNotHeld, store.ErrStaleToken, store.ErrInvalidLease, store.ErrEmptyKey, store.ErrOutOfRange}

func leaseSentinel(err error) error {
	for _, s := range leaseErrors {
		if errors.Is(err, s) {
			return s
		}
	}
	return nil
}

// RunLeaseOps runs the lease operations the input ops encodes against got
// and want (see FuzzLeaseDifferential) and fails at the first difference.
func RunLeaseOps(t *testing.T, got, want store.LeaseStore, ops []byte) {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("fzlease/%016x", rand.Uint64())
	r := &reader{b: ops}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	type tok struct {
		key string
		t   int64
	}
	toGot := map[tok]int64{} // (key, want token) -> got token
	toWant := map[tok]int64{}
	var known []store.Lease // leases want granted (want tokens)
	mapTok := func(i int, key string, g, w int64) {
		if m, ok := toWant[tok{key, g}]; ok {
			if m != w {
				t.Fatalf("op %d: got token %d of %s maps to want %d and %d", i, g, key, m, w)
			}
			return
		}
		if m, ok := toGot[tok{key, w}]; ok && m != g {
			t.Fatalf("op %d: want token %d of %s maps to got %d and %d", i, w, key, m, g)
		}
		for gg, ww := range toWant {
			if gg.key == key && (gg.t < g) != (ww < w) {
				t.Fatalf("op %d: token order of %s differs (%d/%d vs %d/%d)", i, key, gg.t, ww, g, w)
			}
		}
		toWant[tok{key, g}], toGot[tok{key, w}] = w, g
	}
	gotTok := func(key string, w int64) int64 {
		if g, ok := toGot[tok{key, w}]; ok {
			return g
		}
		return w + 1<<40 // never issued on either side
	}
	key := func() string {
		switch c := r.byte(); c {
		case 0xff:
			return ""
		default:
			// (A key with a NUL byte is left out: PostgreSQL refuses it
			// with a driver error where memstore takes it, which the
			// identifier checks must settle.)
			return []string{"a", "b"}[c%2]
		}
	}
	holder := func() string {
		switch c := r.byte(); c {
		case 0xff:
			return ""
		case 0xfe:
			return strings.Repeat("h", store.MaxHolderLen+1)
		case 0xfd:
			return "h\xff"
		default:
			return []string{"h1", "h2", "h3"}[c%3]
		}
	}
	ttl := func() time.Duration {
		c := r.byte()
		switch c % 8 {
		case 0:
			return 0
		case 1:
			return -time.Second
		case 2:
			return store.MinLeaseTTL - time.Nanosecond
		case 3:
			return store.MaxLeaseTTL
		case 4:
			return store.MaxLeaseTTL + time.Microsecond
		default:
			return time.Duration(1+int64(c>>3)%5) * time.Second
		}
	}
	permits := func() int64 {
		c := r.byte()
		switch c % 8 {
		case 0:
			return 0
		case 1:
			return store.MaxPermits
		case 2:
			return store.MaxPermits + 1
		case 3:
			return -1
		default:
			return 1 + int64(c>>3)%3
		}
	}
	pick := func() store.Lease {
		c := r.byte()
		if len(known) == 0 || c < 0x20 {
			return store.Lease{Name: name, Key: key(), Holder: holder(), Token: int64(c%5) + 1}
		}
		return known[int(c)%len(known)]
	}
	fail := func(i int, what string, p any, w, g any, errW, errG error) {
		t.Helper()
		t.Fatalf("op %d: %s %+v:\n want %+v, error %v\n  got %+v, error %v", i, what, p, w, g, errW, errG)
	}
	sameErr := func(errW, errG error) bool {
		sw, sg := leaseSentinel(errW), leaseSentinel(errG)
		return (errW == nil) == (errG == nil) && sw == sg && (errW == nil || sw != nil)
	}
	for i := 0; len(r.b) > 0 && i < 256; i++ {
		op := r.byte()
		switch c := r.byte(); c >> 6 {
		case 0:
			now += int64(c&0x3f) * 100_000
		case 1:
			now += int64(c&0x3f) * second
		case 2:
			now += int64(c&0x3f) * 3600 * second
		default:
			now += int64(c&0x3f) * year / 4
		}
		at := time.UnixMicro(now).UTC()
		switch op % 6 {
		case 0, 1:
			p := store.AcquireParams{Name: name, Key: key(), Holder: holder(), Permits: permits(), TTL: ttl(), Now: at}
			g, errG := got.Acquire(ctx, p)
			w, errW := want.Acquire(ctx, p)
			if !sameErr(errW, errG) {
				fail(i, "acquire", p, w, g, errW, errG)
			}
			if errW != nil {
				continue
			}
			if w.Acquired && g.Acquired {
				mapTok(i, p.Key, g.Lease.Token, w.Lease.Token)
				g.Lease.Token = w.Lease.Token
				known = append(known, w.Lease)
			}
			if w != g {
				fail(i, "acquire", p, w, g, errW, errG)
			}
		case 2:
			l := pick()
			p := store.RenewParams{Name: l.Name, Key: l.Key, Holder: l.Holder, Token: l.Token, TTL: ttl(), Now: at}
			w, errW := want.Renew(ctx, p)
			p.Token = gotTok(l.Key, l.Token)
			g, errG := got.Renew(ctx, p)
			if !sameErr(errW, errG) {
				fail(i, "renew", p, w, g, errW, errG)
			}
			g.Token = l.Token
			if errW == nil && w != g {
				fail(i, "renew", p, w, g, errW, errG)
			}
		case 3:
			l := pick()
			p := store.ReleaseParams{Name: l.Name, Key: l.Key, Holder: l.Holder, Token: l.Token, Now: at}
			errW := want.Release(ctx, p)
			p.Token = gotTok(l.Key, l.Token)
			errG := got.Release(ctx, p)
			if !sameErr(errW, errG) {
				fail(i, "release", p, nil, nil, errW, errG)
			}
		case 4:
			p := store.HoldersParams{Name: name, Key: key(), Now: at}
			w, errW := want.Holders(ctx, p)
			g, errG := got.Holders(ctx, p)
			if !sameErr(errW, errG) {
				fail(i, "holders", p, w, g, errW, errG)
			}
			for j := range g {
				g[j].Token = toWant[tok{p.Key, g[j].Token}]
			}
			if len(w) != len(g) {
				fail(i, "holders", p, w, g, errW, errG)
			}
			for j := range w {
				if w[j] != g[j] {
					fail(i, "holders", p, w, g, errW, errG)
				}
			}
		default:
			l := pick()
			field := "f"
			if r.byte() == 0xff {
				field = ""
			}
			v := []byte(fmt.Sprint("v", i))
			p := store.FencedWriteParams{Name: l.Name, Key: l.Key, Token: l.Token, Field: field, Value: v, Now: at}
			errW := want.FencedWrite(ctx, p)
			p.Token = gotTok(l.Key, l.Token)
			errG := got.FencedWrite(ctx, p)
			if !sameErr(errW, errG) {
				fail(i, "fenced write", p, nil, nil, errW, errG)
			}
			rp := store.FencedReadParams{Name: l.Name, Key: l.Key, Field: field}
			wv, wok, errW := want.FencedRead(ctx, rp)
			gv, gok, errG := got.FencedRead(ctx, rp)
			if !sameErr(errW, errG) || wok != gok {
				fail(i, "fenced read", rp, wv, gv, errW, errG)
			}
			if wok && (wv.Token != toWant[tok{l.Key, gv.Token}] || !bytes.Equal(wv.Value, gv.Value)) {
				fail(i, "fenced read", rp, wv, gv, errW, errG)
			}
		}
	}
}
