package outbound

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/aimd"
	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// Issue 18: two processes against a clock window of 100 answering in
// 5 ms. At the slow start's end A had served 46 of the window and B 54;
// two seconds later 53 and 47. Neither reads the window from its own
// counts. Each tells the store its share of the second refused late
// (tellShare) and reads the fleet's sum once the pause is over
// (readFleetCount): both seconds served 100, so each levels at 0.97 of its
// share of the later one, and the fleet at 97 of 100. Without the store's
// sum (each reading only its own share back), neither does; nor when the
// store fails every write and read of the counts, which costs the read and
// nothing else.
func TestTheFleetsCountGoesThroughTheStore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		oneStore bool // both processes share one store
		failing  bool // the store fails every Take of a count
	}{
		{"the fleet's count", true, false},
		{"each process's own count", false, false},
		{"the store fails the counts", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const sec = int64(time.Second / time.Microsecond)
			const ms = sec / 1000
			t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC) // not near an hour's end
			clk := clocktest.New(t0)
			ctl, err := aimd.New(aimd.Config{Start: 2, SlowStart: 2, Decrease: 0.8, Cooldown: 500 * time.Millisecond,
				IgnoreLatency: true, Plateau: 0.91, Hold: 10 * time.Second, UsageMultiple: -1})
			require.NoError(t, err)
			var stA store.RateStore = memstore.New(memstore.Config{Clock: clk})
			if tc.failing {
				stA = &countBlind{RateStore: stA}
			}
			stB := stA
			if !tc.oneStore {
				stB = memstore.New(memstore.Config{Clock: clk})
			}
			ca, cb := &Client{store: stA, clk: clk}, &Client{store: stB, clk: clk}
			ka := &keyState{key: "api", names: newKeyNames("t:", "a", false).of("api"), adapt: newAdaptive(ctl)}
			kb := &keyState{key: "api", names: newKeyNames("t:", "b", false).of("api"), adapt: newAdaptive(ctl)}
			ctx := context.Background()
			serve := func(ks *keyState, base int64, n int, part int64, rate float64) {
				for i := 0; i < n; i++ {
					ks.adapt.ctl.Observe(&ks.adapt.state, base+int64(i)*part/int64(n)+5*ms, aimd.Sample{Outcome: aimd.Success, Latency: 5 * ms})
				}
				ks.adapt.ctl.SetRate(&ks.adapt.state, rate)
			}
			// An episode in the second from base: A served na at rate
			// ra and was refused at part; B served nb at rb and heard
			// of A's pause 10 ms later. Each tells its share.
			episode := func(base int64, na, nb int, ra, rb float64, part int64) int64 {
				serve(ka, base, na, part, ra)
				serve(kb, base, nb, part, rb)
				at := base + part + 5*ms
				ka.adapt.ctl.Observe(&ka.adapt.state, at, aimd.Sample{Outcome: aimd.Throttled, Latency: 5 * ms, RetryAfter: sec})
				k, n := ka.adapt.shareToTell(at)
				require.Equal(t, base/sec, k)
				require.Equal(t, na, n)
				ca.tellShare(ctx, ka, k, n)
				news, _ := kb.adapt.notePause(at+10*ms, sec-10*ms, 0, false)
				require.True(t, news)
				k, n = kb.adapt.shareToTell(at + 10*ms)
				require.Equal(t, base/sec, k)
				require.Equal(t, nb, n)
				cb.tellShare(ctx, kb, k, n)
				return k
			}
			base := t0.UnixMicro() + 4*sec
			k1 := episode(base, 46, 54, 92, 100, 830*ms)
			clk.Advance(5 * time.Second)
			ca.readFleetCount(ctx, ka, k1, base+2*sec)
			cb.readFleetCount(ctx, kb, k1, base+2*sec)
			base += 2 * sec
			k2 := episode(base, 53, 47, 64, 57, 860*ms)
			ca.readFleetCount(ctx, ka, k2, base+2*sec)
			cb.readFleetCount(ctx, kb, k2, base+2*sec)
			if tc.oneStore && !tc.failing {
				require.InDelta(t, 0.97*53, ka.adapt.rate(), 1e-9, "A: its share of the window")
				require.InDelta(t, 0.97*47, kb.adapt.rate(), 1e-9, "B: its share of the window")
			} else {
				require.Less(t, ka.adapt.rate(), 0.97*53-1, "A: no window read")
				require.Less(t, kb.adapt.rate(), 0.97*47-1, "B: no window read")
			}
			if tc.failing {
				require.Equal(t, int64(8), stA.(*countBlind).failed.Load(), "each process told and asked twice")
			}
		})
	}
}

// countBlind is a store that fails every Take of a fleet count (the keys
// outbound gives them hold ":count:"), and counts the failures.
type countBlind struct {
	store.RateStore
	failed atomic.Int64
}

func (s *countBlind) Take(ctx context.Context, p store.TakeParams) (store.Result, error) {
	if strings.Contains(p.Key, ":count:") {
		s.failed.Add(1)
		return store.Result{}, errors.New("store unreachable")
	}
	return s.RateStore.Take(ctx, p)
}
