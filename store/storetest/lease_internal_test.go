package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
)

// TestCheckFencingCatches makes sure the fencing checker fails the
// histories a broken store would produce.
func TestCheckFencingCatches(t *testing.T) {
	t.Parallel()
	s := int64(time.Second / time.Microsecond)
	good := []fenceEvent{
		{op: "acquire", holder: "A", token: 5, now: 0, ok: true},
		{op: "write", holder: "A", token: 5, now: 1 * s, ok: true},
		{op: "acquire", holder: "B", token: 9, now: 5 * s, ok: true},
		{op: "write", holder: "B", token: 9, now: 5 * s, ok: true},
		{op: "write", holder: "A", token: 5, now: 5*s + 1, err: store.ErrStaleToken},
		{op: "release", holder: "A", token: 5, now: 5*s + 2, err: store.ErrLeaseNotHeld},
		{op: "holders", now: 6 * s, held: []int64{9}},
	}
	require.NoError(t, checkFencing(good))
	for name, edit := range map[string]func(h []fenceEvent){
		"stale write accepted":  func(h []fenceEvent) { h[4].ok, h[4].err = true, nil },
		"token not increasing":  func(h []fenceEvent) { h[2].token = 5 },
		"successor freed":       func(h []fenceEvent) { h[5].ok, h[5].err = true, nil },
		"holders lost B":        func(h []fenceEvent) { h[6].held = nil },
		"holder's write denied": func(h []fenceEvent) { h[3].ok, h[3].err = false, store.ErrStaleToken },
		"double grant":          func(h []fenceEvent) { h[2].now = 1 * s },
	} {
		h := append([]fenceEvent(nil), good...)
		edit(h)
		require.Error(t, checkFencing(h), name)
	}
}
