// Package redisstore is the Redis rate store: a store.RateStore whose state
// lives in Redis, so that any number of processes sharing one Redis (or one
// Redis Cluster, or a ring of Redis servers) share one limit exactly.
//
// # Operations
//
// Every operation (Take, TakeAll, Settle, Sync, Reset) is one call of one Lua
// script, sent with EVALSHA and sent again with EVAL when the server answers
// NOSCRIPT (after a restart or SCRIPT FLUSH). The script reads the server's
// clock (redis.call('TIME'), microseconds), so the clocks of the processes
// never matter, and reimplements store.Eval, store.EvalSettle and
// store.EvalSync in exact integer arithmetic: it answers exactly what
// store/memstore answers for the same state and instant. Requests are
// validated in Go before anything is sent, with the same errors as memstore.
//
// Lua numbers are doubles, exact for integers below 2^53. Unix microseconds
// stay far below that, and the store refuses what could leave it: a GCRA
// limit whose burst times emission interval, or a window, longer than 2^52
// microseconds (about 142 years) fails with store.ErrInvalidLimit, and an
// operation that would leave a key's state at 2^53 or beyond (a delayed
// take, a settled debt or a synced pause reaching the year 2255), or whose
// Now is beyond store.MaxNow, fails with ErrOutOfRange, which wraps
// store.ErrOutOfRange: every backend refuses exactly the same requests.
//
// Redis 6.2 or later is required (SET ... PXAT).
//
// # Key layout
//
// The state of limit name N for key K is one string key:
//
//	<prefix>rate:{K}:N            for example  sluice:rate:{acct42}:binance-weight
//
// holding "T" (a TAT with no counts) or "T C P F" (store.State's Time,
// Count and Prev, and F the state's fresh time under the limit that wrote
// it, store.FreshAt), in decimal. From F on the state reads as nothing
// (store.Live), as on every backend, whether or not Redis has expired the
// key yet. A "T C P" that an older version wrote reads as it is until it
// expires.
// The prefix is Config.Prefix ("sluice:" by default). In K, the bytes
// '%', '{' and '}' are percent-encoded (%25, %7B, %7D); in N, '%' and ':'
// are, so that no two (name, key) pairs share a Redis key.
//
// The braces are a Redis Cluster hash tag: every limit of one key hashes to
// the same slot, so a TakeAll over several limits of one key (one account's
// several exchange limits, say) runs as one script on one node. A key that
// already carries its own hash tag, a non-empty "{...}" as Redis would find
// it, keeps it and is used as is (outside the tag, the same bytes are
// escaped as above):
//
//	key "{acct42}:ip:10.0.0.1"  ->  sluice:rate:{acct42}:ip:10.0.0.1:N
//
// so keys that share a tag share a slot even when they differ. A key without
// a tag is therefore the same key as itself in braces: "acct42" and
// "{acct42}" name the same state.
//
// On a *redis.ClusterClient every key of one TakeAll must map to the same
// slot, and on a *redis.Ring to the same tag; otherwise TakeAll fails with
// ErrCrossSlot before sending anything, naming the keys. Other clients (a
// single server, Sentinel) accept any keys. A prefix carrying a hash tag of
// its own ("sluice:{rl}:") puts every key of the store in one slot, so any
// keys go together, on one node.
//
// A key is deleted as soon as its state equals a fresh key's, and otherwise
// expires (PXAT) when it would become fresh: idle keys cost no memory, and
// expiry never gives budget away.
//
// # Leases
//
// The store is also a store.LeaseStore (lease.go, lease.lua): one script
// call per operation, on TIME. The permits of lease name N for key K are a
// hash <prefix>lease:{K}:N:h (holder -> "token expires"), which expires with
// its last permit; fenced values are a hash <prefix>lease:{K}:N:f; the
// key's token counter <prefix>lease:{K}:N:seq never expires, so fencing
// tokens strictly increase per key for as long as Redis keeps its data.
// That takes persistence across restarts (AOF with appendfsync always for
// no loss at all), a maxmemory-policy that never evicts keys without a TTL
// (noeviction or a volatile-* one, not allkeys-*), and no failover to a
// replica that missed the last INCRs (replication is asynchronous): a lost
// counter reissues tokens. A release PUBLISHes on <prefix>lease-free;
// WatchLease holds one subscription per Store (on a ring, one per shard,
// since a PUBLISH reaches only the shard that ran it) while anyone watches.
// TakeAllAcquire runs the rate script and the lease in one call: its keys
// must share the lease key's slot on a cluster or ring.
//
// # Batching
//
// Concurrent calls on one Store share round trips. A call that finds fewer
// than Config.MaxInFlight round trips under way is sent at once, alone: a
// lone caller waits for exactly one round trip. Calls that arrive while
// MaxInFlight round trips are under way queue up, and when a round trip
// ends the queue (up to Config.MaxBatch calls) leaves as one pipeline. In
// it, the single-key Takes of each hash slot travel as one script call
// that decides them one after the other, in queue order, exactly as if
// each had been a script call of its own at that instant, with one TIME.
// The leading GCRA takes of keys holding a bare TAT (the common case) are
// decided and stored one by one, a GET and at most a SET each; from the
// first other take on, each distinct key is read once and written at most
// once, at the end. A script call that fails part way (a key of another
// type) fails every take it carried, though the GCRA takes decided
// before the failure may have been charged: quota spent, never extra
// admissions. Other calls are script calls of their own in the same
// pipeline. A cluster client splits the pipeline by node by itself.
//
// Each call gets its own result and honours its own context: a call whose
// context ends while it is queued returns at once and is never sent; one
// whose context ends while its round trip is under way returns at once
// too, though Redis may already have decided (and charged) it. This holds
// whether or not the client has ContextTimeoutEnabled: a call with a
// context that can end waits on a channel, not inside go-redis, except
// where go-redis itself bounds the wait. A call whose context can never
// end (context.Background()) makes its lone round trip on the caller's
// goroutine, and so does one whose context has a deadline on a client with
// ContextTimeoutEnabled (a *redis.Client, ClusterClient or Ring): go-redis
// then bounds the round trip's I/O by that deadline, and the call returns
// when it passes without a goroutine of its own; a cancellation before the
// deadline is seen when the answer comes or the deadline passes. The
// store's HonoursDeadline says so to package guard, which then calls it on
// the caller's goroutine too.
package redisstore
