package redisstore

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluicerl/sluice/store"
)

// The wire protocol of rate.lua: every RateStore operation is one call of
// the script, whose ARGV[1] names the operation. This file is the one place
// that writes a call's arguments (one function per operation) and reads its
// reply (decode, for every operation). Every number is an integer below
// 2^53 (Lua's numbers are doubles); times and spans are microseconds.
//
// A limit is three numbers, alg x y: alg 0 (GCRA) with x the emission
// interval and y the burst, or alg 1 (fixed window) or 2 (sliding window)
// with x the window and y the limit. now is an instant in Unix
// microseconds, 0 for the server clock (TIME); md is a take's max delay.
//
// Operations, their arguments (ARGV[1] first) and their replies:
//
//	g  one GCRA take           g x y cost [now [md]]           {now, item, with trailing zeros left out}
//	t  takes, all or nothing   t now md {alg x y cost}...      {now, all, item...}
//	b  independent takes       b 0 {now md alg x y cost}...    {server now, item...}
//	s  settle                  s now alg x y diff rend most    {now, item}
//	y  sync                    y now alg x y remaining reset   {now, item}
//	r  reset                   r 0                             keys deleted (0 or 1)
//
// An item is five numbers: allowed (1 or 0), remaining, reset after, retry
// after, delay. 'g' leaves out the item's trailing zeros: an allowed,
// undelayed take replies {now, 1, remaining, reset after}, four numbers
// (its hot path returns no more). 'b' decides its takes one after the
// other, each at its own now (the server clock when 0, read once a call);
// its reply carries the server clock, or 0 when no take read it. The
// diff of 's' is (actual - reserved) x interval for GCRA and actual -
// reserved for windows; rend is the end of the window the reservation was
// taken in and most the most a window may count after a charge (windows
// only, 0 for GCRA). 't' with one key of a GCRA limit is the take 'g'
// makes, in the longer layout.
//
// A failed call ('g', 't', 's', 'y') replies {now, code}, and writes
// nothing; in a 'b' reply a failed take's item is {code, 0, 0, 0, 0} and
// the others stand. code is -1 for a charge too large to count
// (store.ErrCostExceedsLimit) and -2 for a state beyond 2^53
// (ErrOutOfRange).

// The operations, as ARGV[1].
const (
	opTake      = "g"
	opTakeAll   = "t"
	opBatch     = "b"
	opSettle    = "s"
	opSync      = "y"
	opReset     = "r"
	itemNumbers = 5 // the numbers of one item
)

// Failure codes, in place of allowed.
const (
	codeCostExceedsLimit = -1
	codeOutOfRange       = -2
)

// take is one Take as the script sees it: a validated request.
type take struct {
	group group
	// now is the instant (0: the server clock) and md the max delay;
	// alg, x and y the limit (limitArgs).
	now, md, alg, x, y, cost int64
}

// op returns the operation of a call of its own: 'g' for GCRA, else 't'.
func (t *take) op() string {
	if t.alg == 0 {
		return opTake
	}
	return opTakeAll
}

// args returns the arguments of a call of its own.
func (t *take) args() []any {
	if t.alg != 0 {
		return []any{opTakeAll, t.now, t.md, t.alg, t.x, t.y, t.cost}
	}
	// Trailing zeros (the server clock, no delay) are left out.
	args := make([]any, 4, 6)
	args[0], args[1], args[2], args[3] = opTake, t.x, t.y, t.cost
	switch {
	case t.md != 0:
		args = append(args, t.now, t.md)
	case t.now != 0:
		args = append(args, t.now)
	}
	return args
}

// appendBatch appends the take to a 'b' call's arguments. own is the
// take's own arguments (from args), whose values it reuses so that none is
// boxed twice.
func (t *take) appendBatch(b, own []any) []any {
	switch {
	case t.alg == 0 && len(own) >= 4: // g x y cost [now [md]]
		return append(b, t.now, t.md, int64(0), own[1], own[2], own[3])
	case t.alg != 0 && len(own) == 7: // t now md alg x y cost
		return append(b, own[1:]...)
	}
	return append(b, t.now, t.md, t.alg, t.x, t.y, t.cost)
}

// takeAllArgs returns the arguments of a 't' call: the instant, the max
// delay, and per item alg, x, y, cost (limits holds alg, x, y of each).
func takeAllArgs(now, md int64, limits [][3]int64, costs []int64) []any {
	args := make([]any, 3, 3+4*len(limits))
	args[0], args[1], args[2] = opTakeAll, now, md
	for i, l := range limits {
		args = append(args, l[0], l[1], l[2], costs[i])
	}
	return args
}

// settleRequest returns the 's' call on the rate key key.
func settleRequest(key string, now, alg, x, y, diff, rend, most int64) request {
	return request{op: opSettle, keys: []string{key}, args: []any{opSettle, now, alg, x, y, diff, rend, most}}
}

// syncRequest returns the 'y' call on the rate key key.
func syncRequest(key string, now, alg, x, y, remaining, resetAfter int64) request {
	return request{op: opSync, keys: []string{key}, args: []any{opSync, now, alg, x, y, remaining, resetAfter}}
}

// resetRequest returns the 'r' call on the rate key key.
func resetRequest(key string) request {
	return request{op: opReset, keys: []string{key}, args: []any{opReset, 0}}
}

// item is one decision of a reply.
type item struct {
	allowed                                  bool
	remaining, resetAfter, retryAfter, delay int64
	// err is a 'b' take's failure; the item is otherwise zero.
	err error
}

// result builds the Result of an item decided at now under l.
func (it *item) result(l *store.Limit, now int64) store.Result {
	return store.Result{
		Allowed:    it.allowed,
		Limit:      l.Max(),
		Remaining:  it.remaining,
		RetryAfter: micros(it.retryAfter),
		ResetAfter: micros(it.resetAfter),
		Delay:      micros(it.delay),
		At:         now,
	}
}

// errReply is a reply that breaks the protocol.
var errReply = errors.New("redisstore: unexpected reply from the script")

func errUnexpectedReply(n int) error {
	return fmt.Errorf("%w: %d numbers", errReply, n)
}

// decode reads the reply raw of a call of op into items, which has room for
// exactly the items the reply must carry: one for 'g', 's' and 'y', one per
// key for 't' and 'b', none for 'r'. It returns the instant the script
// decided at ('b': the server clock, 0 if no take read it) and, for 't',
// whether every item was allowed. A failure the script reports is
// store.ErrCostExceedsLimit or ErrOutOfRange; a reply of another type,
// length or value wraps errReply. It never panics.
func decode(op string, raw any, items []item) (now int64, all bool, err error) {
	head, short, long := 1, 1+itemNumbers, 1+itemNumbers // numbers before the first item; shortest and longest reply
	switch op {
	case opReset:
		if _, ok := raw.(int64); !ok || len(items) != 0 {
			return 0, false, fmt.Errorf("%w: %T for a reset", errReply, raw)
		}
		return 0, false, nil
	case opTake:
		short = 1 + 3 // now, allowed, remaining, reset after
	case opSettle, opSync:
	case opTakeAll:
		head = 2
		short = 2 + itemNumbers*len(items)
		long = short
	case opBatch:
		short = 1 + itemNumbers*len(items)
		long = short
	default:
		return 0, false, fmt.Errorf("redisstore: unknown script operation %q", op)
	}
	if op != opTakeAll && op != opBatch && len(items) != 1 {
		return 0, false, fmt.Errorf("redisstore: %d items for script operation %q", len(items), op)
	}
	v, ok := raw.([]any)
	if !ok {
		return 0, false, fmt.Errorf("%w: %T", errReply, raw)
	}
	num := func(i int) (int64, error) {
		if i >= len(v) {
			return 0, nil // a trailing zero left out
		}
		n, ok := v[i].(int64)
		if !ok {
			return 0, fmt.Errorf("%w: element %d is %T", errReply, i, v[i])
		}
		return n, nil
	}
	if len(v) == 2 && op != opBatch {
		// {now, code}, unless a 't' of no items
		code, err := num(1)
		if err != nil {
			return 0, false, err
		}
		if _, err := num(0); err != nil {
			return 0, false, err
		}
		if err := failure(code); err != nil {
			return 0, false, err
		}
	}
	if len(v) < short || len(v) > long {
		return 0, false, errUnexpectedReply(len(v))
	}
	if now, err = num(0); err != nil {
		return 0, false, err
	}
	if op == opTakeAll {
		switch a, err := num(1); {
		case err != nil:
			return 0, false, err
		case a != 0 && a != 1:
			return 0, false, fmt.Errorf("%w: all is %d", errReply, a)
		default:
			all = a == 1
		}
	}
	for i := range items {
		var n [itemNumbers]int64
		for j := range n {
			if n[j], err = num(head + i*itemNumbers + j); err != nil {
				return 0, false, err
			}
		}
		if err := readItem(&items[i], &n, op == opBatch); err != nil {
			return 0, false, err
		}
	}
	return now, all, nil
}

// readItem reads an item's five numbers; a failure code in place of
// allowed is the item's error when inItem (a 'b' take), else the reply's.
func readItem(it *item, num *[itemNumbers]int64, inItem bool) error {
	switch num[0] {
	case 0, 1:
		*it = item{allowed: num[0] == 1, remaining: num[1], resetAfter: num[2], retryAfter: num[3], delay: num[4]}
		return nil
	}
	err := failure(num[0])
	if err == nil {
		return fmt.Errorf("%w: allowed is %d", errReply, num[0])
	}
	if !inItem {
		return fmt.Errorf("%w: a failure code in an item", errReply)
	}
	*it = item{err: err}
	return nil
}

// failure returns the error of a failure code, nil for any other number.
func failure(code int64) error {
	switch code {
	case codeCostExceedsLimit:
		return store.ErrCostExceedsLimit
	case codeOutOfRange:
		return ErrOutOfRange
	}
	return nil
}

// scriptErr wraps the error of a script call. The script raises an error
// only for a state it cannot count exactly (ErrOutOfRange).
func scriptErr(err error) error {
	if strings.Contains(err.Error(), "sluice: state beyond 2^53") {
		return fmt.Errorf("%w: %v", ErrOutOfRange, err)
	}
	return fmt.Errorf("redisstore: %w", err)
}
