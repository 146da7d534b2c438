package outbound

import (
	"strings"
	"sync/atomic"

	"github.com/sluicerl/sluice/aimd"
)

// keyState is one key's local state, a struct per layer: its store keys,
// its bulkhead, its breaker and retry budget, its adaptive rate, and its
// counters. Each part guards itself; nothing here is shared between keys.
type keyState struct {
	key, label string
	names      storeKeys
	bulk       bulkhead
	policy     *keyPolicy
	adapt      *adaptive
	counts     keyCounters
	// users counts the calls holding the key (from the registry's acquire
	// to its release): a key in use is never evicted.
	users atomic.Int64
	// lastActive is when the key last saw an outcome (Unix µs).
	lastActive atomic.Int64
	// left is when this process's last attempt on the key left (Unix µs;
	// see Client.spread).
	left atomic.Int64
}

func newKeyState(key, label string, names keyNames, ctl *aimd.Controller, pol policy, maxConc int, now int64) *keyState {
	ks := &keyState{key: key, label: label, names: names.of(key), policy: pol.newKey(key), adapt: newAdaptive(ctl)}
	ks.bulk.init(maxConc)
	ks.lastActive.Store(now)
	return ks
}

// keyNames makes a key's store keys.
type keyNames struct {
	prefix, instance string
	shared           bool
}

func newKeyNames(prefix, instance string, shared bool) keyNames {
	return keyNames{prefix: prefix, instance: instance, shared: shared}
}

// storeKeys are the store keys of one key. Every one carries the same hash
// tag, so that a TakeAll over them runs on one Redis Cluster slot.
type storeKeys struct {
	pace   string // the pacing GCRA: this client's own, or the fleet's with SharedRate
	fleet  string // the fleet's pacing GCRA
	pause  string // the fleet's pause, shared by every client of the store
	rate   string // the fleet's adapted rate (SharedRate)
	budget string // the fleet's learned window budget
	ban    string // the fleet's ban: the pause of a provider's ban (see syncBan)
	count  string // the fleet's count of calls served in a clock second (see tellShare)
	calls  string // the fleet's count of calls answered in a clock second (see tellCalls)
	space  string // the fleet's spacing GCRA (see turn.space)
}

func (n keyNames) of(key string) storeKeys {
	tagged := n.prefix + "{" + braces.Replace(key) + "}"
	pace := tagged + "#" + n.instance
	if n.shared {
		pace = tagged
	}
	return storeKeys{pace: pace, fleet: tagged, pause: tagged + ":pause", rate: tagged + ":rate", budget: tagged + ":budget", ban: tagged + ":ban", count: tagged + ":count", calls: tagged + ":calls", space: tagged + ":space"}
}

// braces escapes a key's braces, so that the hash tag is always the whole
// key.
var braces = strings.NewReplacer("{", "%7B", "}", "%7D", "%", "%25")

// keyCounters are a key's call counters for Snapshot.
type keyCounters struct {
	requests, successes, throttles, errors, retries, rejected atomic.Int64
}
