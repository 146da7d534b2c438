package storetest

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
)

// The linearizability check: clients race acquires, releases (their own
// token or a stale one), fenced writes and holder listings on one key with
// two permits, and porcupine checks that the recorded history has a
// sequential order, consistent with real time, that the lease model below
// accepts. The clock stands still (Now is fixed), so nothing expires: the
// check is about the atomicity of each operation under concurrency.

const linPermits = 2

type linOp uint8

const (
	linAcquire linOp = iota
	linRelease
	linWrite
	linHolders
)

type linInput struct {
	op     linOp
	holder string
	token  int64
}

type linOutput struct {
	ok      bool  // acquired, released, written
	token   int64 // acquire: the token granted
	holders string
}

// linState is the model's state: the two permits (holder and token, by
// holder name, "" for free), the greatest token issued, and the token of
// the last accepted write. It is comparable with ==.
type linState struct {
	h     [linPermits]string
	t     [linPermits]int64
	max   int64
	wrote int64
}

func (s linState) find(holder string) int {
	for i := range s.h {
		if s.h[i] != "" && s.h[i] == holder {
			return i
		}
	}
	return -1
}

func (s linState) holds(token int64) bool {
	for i := range s.h {
		if s.h[i] != "" && s.t[i] == token {
			return true
		}
	}
	return false
}

func (s linState) list() string {
	// By token, as Holders answers.
	type ht struct {
		h string
		t int64
	}
	var l []ht
	for i := range s.h {
		if s.h[i] != "" {
			l = append(l, ht{s.h[i], s.t[i]})
		}
	}
	if len(l) == 2 && l[0].t > l[1].t {
		l[0], l[1] = l[1], l[0]
	}
	return fmt.Sprint(l)
}

var leaseModel = porcupine.Model{
	Init: func() interface{} { return linState{} },
	Step: func(st, in, out interface{}) (bool, interface{}) {
		s, i, o := st.(linState), in.(linInput), out.(linOutput)
		switch i.op {
		case linAcquire:
			if k := s.find(i.holder); k >= 0 {
				return o.ok && o.token == s.t[k], s
			}
			for k := range s.h {
				if s.h[k] == "" {
					if !o.ok || o.token <= s.max {
						return false, s
					}
					s.h[k], s.t[k], s.max = i.holder, o.token, o.token
					return true, s
				}
			}
			return !o.ok, s
		case linRelease:
			k := s.find(i.holder)
			held := k >= 0 && s.t[k] == i.token
			if held {
				s.h[k], s.t[k] = "", 0
			}
			return o.ok == held, s
		case linWrite:
			ok := s.holds(i.token) && i.token >= s.wrote
			if ok {
				s.wrote = i.token
			}
			return o.ok == ok, s
		case linHolders:
			return o.holders == s.list(), s
		}
		return false, s
	},
	DescribeOperation: func(in, out interface{}) string {
		return fmt.Sprintf("%+v -> %+v", in, out)
	},
}

func testLeaseLinearizable(b *leaseBundle) {
	t := b.t
	const clients, opsEach = 5, 30
	now := at(time.Hour)
	var (
		clk  atomic.Int64
		mu   sync.Mutex
		hist []porcupine.Operation
		wg   sync.WaitGroup
	)
	record := func(c int, in linInput, call int64, out linOutput) {
		ret := clk.Add(1)
		mu.Lock()
		hist = append(hist, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
		mu.Unlock()
	}
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			holder := fmt.Sprint("c", c)
			var tokens []int64 // every token this client was granted
			for range opsEach {
				var in linInput
				var out linOutput
				var err error
				token := int64(0)
				if len(tokens) > 0 {
					token = tokens[len(tokens)-1]
					if rng.IntN(4) == 0 {
						token = tokens[rng.IntN(len(tokens))] // maybe stale
					}
				}
				call := clk.Add(1)
				switch r := rng.IntN(20); {
				case r < 7:
					in = linInput{op: linAcquire, holder: holder}
					var res store.AcquireResult
					res, err = b.s.Acquire(b.ctx, store.AcquireParams{Name: b.name, Key: "k", Holder: holder, Permits: linPermits, TTL: time.Minute, Now: now})
					out = linOutput{ok: res.Acquired, token: res.Lease.Token}
					if res.Acquired {
						tokens = append(tokens, res.Lease.Token)
					}
				case r < 13:
					in = linInput{op: linRelease, holder: holder, token: token}
					err = b.s.Release(b.ctx, store.ReleaseParams{Name: b.name, Key: "k", Holder: holder, Token: token, Now: now})
					out.ok = err == nil
					if err == store.ErrLeaseNotHeld {
						err = nil
					}
				case r < 18:
					in = linInput{op: linWrite, token: token}
					err = b.s.FencedWrite(b.ctx, store.FencedWriteParams{Name: b.name, Key: "k", Token: token, Field: "f", Value: []byte(holder), Now: now})
					out.ok = err == nil
					if err == store.ErrStaleToken {
						err = nil
					}
				default:
					in = linInput{op: linHolders}
					var hs []store.Lease
					hs, err = b.s.Holders(b.ctx, store.HoldersParams{Name: b.name, Key: "k", Now: now})
					var s linState
					for i, l := range hs {
						if i < linPermits {
							s.h[i], s.t[i] = l.Holder, l.Token
						}
					}
					out.holders = s.list()
					if len(hs) > linPermits {
						out.holders = fmt.Sprint("more than ", linPermits, " holders: ", hs)
					}
				}
				if err != nil {
					t.Errorf("client %d: %+v: %v", c, in, err)
					return
				}
				record(c, in, call, out)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	res := porcupine.CheckOperationsTimeout(leaseModel, hist, 60*time.Second)
	require.Equal(t, porcupine.Ok, res, "the history of %d operations is not linearizable", len(hist))
}
