package storetest

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicerl/sluice/store"
)

//go:embed testdata/fuzz/FuzzDifferential testdata/fuzz/FuzzLeaseDifferential
var fuzzCorpus embed.FS

// FuzzDifferential is the body of every backend's FuzzDifferential: it
// decodes each fuzz input into a sequence of rate operations (Take,
// TakeAll, Settle, Sync and Reset over GCRA, fixed and sliding windows,
// names shared by several algorithms, valid and invalid limits, costs,
// delays and reports from zero to the extremes: 2^52 and 2^62 units,
// limits of 10^6 a second and of one a century, Now steps of microseconds
// to centuries, forwards and back, and Now overrides beyond store.MaxNow)
// and runs it against the store that got returns and against a fresh
// memstore (want), with the same store-side Now, failing at the first
// answer or error that differs. Errors are compared by the store sentinel
// they match (errors.Is); an error matching none is a failure. Keys carry a
// random tag, so got may return one store shared by every input.
//
// The seed corpus is embedded from this package's
// testdata/fuzz/FuzzDifferential and added with f.Add, so `go test` runs it
// against every backend whose package calls this; add a crasher a backend
// finds there.
func FuzzDifferential(f *testing.F, got func(t *testing.T) store.RateStore, want func() store.RateStore) {
	f.Helper()
	for _, seed := range corpusOf(f, "FuzzDifferential") {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		RunOps(t, got(t), want(), ops)
	})
}

// corpusOf reads the embedded seed corpus of a target: files in the
// `go test fuzz v1` format holding one []byte.
func corpusOf(f *testing.F, target string) [][]byte {
	dir := "testdata/fuzz/" + target
	entries, err := fs.ReadDir(fuzzCorpus, dir)
	if err != nil {
		f.Fatalf("storetest: reading the seed corpus: %v", err)
	}
	var out [][]byte
	for _, e := range entries {
		b, err := fuzzCorpus.ReadFile(path.Join(dir, e.Name()))
		if err != nil {
			f.Fatalf("storetest: %v", err)
		}
		v, err := parseCorpusFile(b)
		if err != nil {
			f.Fatalf("storetest: seed %s: %v", e.Name(), err)
		}
		out = append(out, v)
	}
	return out
}

func parseCorpusFile(b []byte) ([]byte, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() || sc.Text() != "go test fuzz v1" {
		return nil, errors.New("not a go test fuzz v1 file")
	}
	if !sc.Scan() {
		return nil, errors.New("no value")
	}
	line := strings.TrimSpace(sc.Text())
	if !strings.HasPrefix(line, "[]byte(") || !strings.HasSuffix(line, ")") {
		return nil, fmt.Errorf("want one []byte, got %q", line)
	}
	s, err := strconv.Unquote(line[len("[]byte(") : len(line)-1])
	if err != nil {
		return nil, err
	}
	return []byte(s), nil
}

// reader hands out the fuzz input a piece at a time; past its end it
// reads zeros.
type reader struct{ b []byte }

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) u64(n int) uint64 {
	var v uint64
	for range n {
		v = v<<8 | uint64(r.byte())
	}
	return v
}

const (
	fuzzUS = int64(1)
	second = 1_000_000 * fuzzUS
	year   = 365*24*3600*second + 6*3600*second
)

// fuzzLimits are the limits an input picks by index; names repeat across
// algorithms (policy reloads) so that each reads the state another wrote.
var fuzzLimits = []store.Limit{
	{Name: "a", Algorithm: store.GCRA, Rate: 10, Period: time.Second, Burst: 5},
	{Name: "a", Algorithm: store.FixedWindow, Rate: 10, Period: time.Second},
	{Name: "a", Algorithm: store.SlidingWindow, Rate: 7, Period: 500 * time.Millisecond},
	{Name: "b", Algorithm: store.GCRA, Rate: 1_000_000, Period: time.Second, Burst: 1},
	{Name: "b", Algorithm: store.GCRA, Rate: 1, Period: time.Second, Burst: 1},
	{Name: "b", Algorithm: store.GCRA, Rate: 3, Period: 700 * time.Millisecond},
	{Name: "c", Algorithm: store.GCRA, Rate: 1, Period: time.Duration(100*year) * time.Microsecond, Burst: 1},
	{Name: "c", Algorithm: store.GCRA, Rate: 1, Period: time.Duration(store.MaxNow-1) * time.Microsecond, Burst: 1},
	{Name: "c", Algorithm: store.FixedWindow, Rate: 1, Period: time.Duration(100*year) * time.Microsecond},
	{Name: "c", Algorithm: store.SlidingWindow, Rate: 1, Period: time.Duration(store.MaxNow) * time.Microsecond},
	{Name: "d", Algorithm: store.FixedWindow, Rate: 1 << 52, Period: time.Second},
	{Name: "d", Algorithm: store.SlidingWindow, Rate: 1 << 20, Period: 1 << 32 * time.Microsecond},
	{Name: "d", Algorithm: store.GCRA, Rate: 1 << 40, Period: 1 << 45 * time.Microsecond, Burst: 1<<12 - 1},
	{Name: "e", Algorithm: store.GCRA, Rate: 0, Period: time.Second},                               // invalid
	{Name: "e", Algorithm: store.FixedWindow, Rate: 5, Period: 0},                                  // invalid
	{Name: "e", Algorithm: store.GCRA, Rate: 5, Period: time.Second, Burst: -1},                    // invalid
	{Name: "", Algorithm: store.GCRA, Rate: 5, Period: time.Second},                                // no name
	{Name: "e", Algorithm: store.Algorithm(7), Rate: 5, Period: time.Second},                       // unknown
	{Name: "e", Algorithm: store.SlidingWindow, Rate: 1 << 30, Period: 1 << 30 * time.Microsecond}, // too large to slide
}

func (r *reader) limit() store.Limit {
	c := r.byte()
	if c < 0xc0 {
		return fuzzLimits[int(c)%len(fuzzLimits)]
	}
	// A limit of the input's own making.
	l := store.Limit{Name: string(rune('a' + c%5)), Algorithm: store.Algorithm(r.byte() % 4)}
	l.Rate = r.num()
	l.Period = time.Duration(r.num()) * time.Microsecond
	if r.byte()%2 == 0 {
		l.Burst = r.num()
	}
	return l
}

// num returns a number of the input's choosing, with a bias to the
// boundaries: small numbers, powers of two and their neighbours, 2^52,
// 2^53, 2^62 and the largest int64, and a few negative ones.
func (r *reader) num() int64 {
	c := r.byte()
	switch c >> 5 {
	case 0, 1:
		return int64(c & 0x3f) // 0..63
	case 2:
		return int64(r.u64(2)) + 1
	case 3:
		return int64(r.u64(4))
	case 4:
		// Near a power of two: 2^e + (-16..15).
		return int64(1)<<(r.byte()%63) + int64(int8(c<<3))>>3
	case 5:
		return []int64{1 << 52, 1<<52 - 1, 1<<52 + 1, 1 << 53, 1 << 62, 1<<63 - 1, store.MaxNow - 1, 100 * year}[c&7]
	case 6:
		return -int64(c&0x1f) - 1
	default:
		return int64(r.u64(8) >> 1)
	}
}

func (r *reader) cost(l store.Limit) int64 {
	c := r.byte()
	switch c % 8 {
	case 0, 1, 2:
		if m := l.Max(); m >= 0 && m < 1<<62 {
			return int64(c>>3) % (m + 1)
		}
		return int64(c >> 3)
	case 3:
		return l.Max()
	case 4:
		return l.Max() + 1
	default:
		return r.num()
	}
}

func (r *reader) duration() time.Duration {
	c := r.byte()
	switch c % 4 {
	case 0:
		return 0
	case 1:
		return time.Duration(c>>2) * time.Millisecond
	case 2:
		return time.Duration(r.num()) * time.Microsecond
	default:
		return []time.Duration{1<<63 - 1, -1 << 63, time.Duration(100*year) * time.Microsecond, -time.Second,
			time.Duration(store.MaxTime) * time.Microsecond, time.Duration(store.MaxNow) * time.Microsecond}[int(c>>2)%6]
	}
}

// RunOps runs the operations the input ops encodes against got and want
// (see FuzzDifferential) and fails at the first difference.
func RunOps(t *testing.T, got, want store.RateStore, ops []byte) {
	t.Helper()
	ctx := context.Background()
	tag := fmt.Sprintf("fz/%016x/", rand.Uint64())
	keys := []string{tag + "k", tag + "j", ""}
	r := &reader{b: ops}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	var lastAt int64
	key := func() string {
		c := r.byte()
		if c == 0xff {
			return "" // ErrEmptyKey
		}
		return keys[int(c)%2]
	}
	for i := 0; len(r.b) > 0 && i < 256; i++ {
		op := r.byte()
		// The instant: a step of the input's choosing.
		switch c := r.byte(); c >> 6 {
		case 0:
			now += int64(c&0x3f) * 1000
		case 1:
			now += int64(c&0x3f) * second
		case 2:
			now -= int64(c&0x3f) * 1000
		default:
			switch c & 7 {
			case 0:
				now += int64(c>>3&7) * year
			case 1:
				now -= int64(c>>3&7) * year
			case 2:
				now = r.num()
			case 3:
				now += r.num()
			default:
				now += int64(r.u64(3))
			}
		}
		if now == 0 {
			now = 1 // the Unix epoch means the store clock
		}
		at := time.UnixMicro(now).UTC()
		var desc string
		var w, g any
		var werr, gerr error
		switch op % 6 {
		case 0, 1:
			l := r.limit()
			p := store.TakeParams{Key: key(), Limit: l, Cost: r.cost(l), Now: at}
			if op&0x80 != 0 {
				p.MaxDelay = r.duration()
			}
			desc = fmt.Sprintf("take %+v", p)
			wr, e1 := want.Take(ctx, p)
			gr, e2 := got.Take(ctx, p)
			w, g, werr, gerr = wr, gr, e1, e2
			if e1 == nil && wr.Allowed {
				lastAt = wr.At
			}
		case 2:
			p := store.TakeAllParams{Now: at}
			if op&0x80 != 0 {
				p.MaxDelay = r.duration()
			}
			for range 1 + int(op>>3)%3 {
				l := r.limit()
				p.Items = append(p.Items, store.Item{Key: key(), Limit: l, Cost: r.cost(l)})
			}
			desc = fmt.Sprintf("take all %+v", p)
			wr, e1 := want.TakeAll(ctx, p)
			gr, e2 := got.TakeAll(ctx, p)
			w, g, werr, gerr = wr, gr, e1, e2
		case 3:
			l := r.limit()
			p := store.SettleParams{Key: key(), Limit: l, Reserved: r.cost(l), Actual: r.cost(l), ReservedAt: lastAt, Now: at}
			if op&0x80 != 0 {
				p.ReservedAt = now - r.num()
			}
			desc = fmt.Sprintf("settle %+v", p)
			wr, e1 := want.Settle(ctx, p)
			gr, e2 := got.Settle(ctx, p)
			w, g, werr, gerr = wr, gr, e1, e2
		case 4:
			l := r.limit()
			p := store.SyncParams{Key: key(), Limit: l, Remaining: r.cost(l), ResetAfter: r.duration(), Now: at}
			desc = fmt.Sprintf("sync %+v", p)
			wr, e1 := want.Sync(ctx, p)
			gr, e2 := got.Sync(ctx, p)
			w, g, werr, gerr = wr, gr, e1, e2
		default:
			p := store.ResetParams{Key: key(), Limit: r.limit()}
			desc = fmt.Sprintf("reset %+v", p)
			werr = want.Reset(ctx, p)
			gerr = got.Reset(ctx, p)
		}
		wk, gk := sentinel(werr), sentinel(gerr)
		if werr != nil && wk == nil || gerr != nil && gk == nil {
			t.Fatalf("op %d: %s: unexpected error: want %v, got %v", i, desc, werr, gerr)
		}
		if !errors.Is(wk, gk) || !errors.Is(gk, wk) {
			t.Fatalf("op %d: %s:\n want error %v\n  got error %v\n(want result %+v, got result %+v)", i, desc, werr, gerr, w, g)
		}
		if werr == nil && !equalResults(w, g) {
			t.Fatalf("op %d: %s:\n want %+v\n  got %+v", i, desc, w, g)
		}
	}
}

var sentinels = []error{store.ErrCostExceedsLimit, store.ErrNegativeCost, store.ErrInvalidLimit,
	store.ErrEmptyKey, store.ErrOutOfRange}

// sentinel returns the store sentinel err matches, or nil.
func sentinel(err error) error {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return s
		}
	}
	return nil
}

func equalResults(w, g any) bool {
	switch w := w.(type) {
	case store.Result:
		return w == g.(store.Result)
	case store.AllResult:
		gr := g.(store.AllResult)
		if w.Allowed != gr.Allowed || len(w.Results) != len(gr.Results) {
			return false
		}
		for i := range w.Results {
			if w.Results[i] != gr.Results[i] {
				return false
			}
		}
		return true
	}
	return w == nil && g == nil
}
