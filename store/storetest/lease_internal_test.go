package storetest

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
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

// TestLeaseModelCatches makes sure the linearizability check fails the
// histories a broken store would produce.
func TestLeaseModelCatches(t *testing.T) {
	t.Parallel()
	op := func(c int, in linInput, call int64, out linOutput, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret}
	}
	acq := func(h string) linInput { return linInput{op: linAcquire, holder: h} }
	good := []porcupine.Operation{
		op(0, acq("a"), 1, linOutput{ok: true, token: 1}, 2),
		op(1, acq("b"), 1, linOutput{ok: true, token: 2}, 3),
		op(2, acq("c"), 4, linOutput{ok: false}, 5),
		op(0, linInput{op: linWrite, token: 1}, 6, linOutput{ok: true}, 7),
		op(1, linInput{op: linWrite, token: 2}, 8, linOutput{ok: true}, 9),
		op(0, linInput{op: linRelease, holder: "a", token: 1}, 10, linOutput{ok: true}, 11),
		op(0, linInput{op: linHolders}, 12, linOutput{holders: "[{b 2}]"}, 13),
	}
	require.True(t, porcupine.CheckOperations(leaseModel, good))
	for name, edit := range map[string]func(h []porcupine.Operation){
		"three holders of two permits": func(h []porcupine.Operation) { h[2].Output = linOutput{ok: true, token: 3} },
		"a token not increasing":       func(h []porcupine.Operation) { h[1].Output = linOutput{ok: true, token: 1} },
		"an older token wrote last":    func(h []porcupine.Operation) { h[3].Call, h[3].Return = 10, 10 },
		"a stale release freed":        func(h []porcupine.Operation) { h[5].Input = linInput{op: linRelease, holder: "a", token: 2} },
		"holders lost b":               func(h []porcupine.Operation) { h[6].Output = linOutput{holders: "[]"} },
	} {
		h := append([]porcupine.Operation(nil), good...)
		edit(h)
		require.False(t, porcupine.CheckOperations(leaseModel, h), name)
	}
}
