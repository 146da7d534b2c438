// Package pgstore keeps rate state in PostgreSQL, so that any number of
// processes on any number of machines share one limit.
//
// Every operation is one statement, one round trip: a call of a PL/pgSQL
// function that store/migration installs (sluice_rate_take, _take_all,
// _settle, _sync), which reimplements store.Eval, store.EvalSettle and
// store.EvalSync in bigint arithmetic and returns exactly what memstore
// would. The database clock decides (clock_timestamp(), read inside the
// statement), unless a test passes Now.
//
// A take that would change a key's state is a single conditional UPDATE:
// PostgreSQL locks the row and, if another transaction changed it in the
// meantime, re-evaluates the condition and the new state on the latest
// version, so there is no read-then-write race. Denials and peeks only read
// (no lock, no transaction id, no WAL flush). A key with no row yet is
// created with INSERT ... ON CONFLICT DO NOTHING, and losing that race
// retries. TakeAll locks every row it touches in (name, key) byte order,
// creating missing ones as it goes, so that concurrent multi-limit takes
// never deadlock, and writes only if every item is allowed.
//
// The database clock is read when the statement starts, before it may wait
// for a row lock held by a concurrent decision on the same key; such a
// decision is timed a little before the one it waited for. The arithmetic
// takes that as a clock that ran backwards, which never admits more.
//
// The schema lives in the pool's current schema (its search_path): apply it
// with Migrate or `sluice migrate up`. State is one row per (limit name, key)
// in sluice_rate_state, whose fresh_at column is an upper bound on when the
// row's state equals a fresh key's; Cleanup deletes the rows past it. Writes
// move fresh_at a minute beyond the true time, and only when the true time
// passes it, so that most decisions update the row in place (a HOT update,
// no index writes). A write that leaves a state fresh already stores zeros
// (store.Kept, migration 0005), as Redis and memstore drop the key. The
// column exact_fresh_at (migration 0008, not indexed) holds the exact time,
// under the limit that wrote the state, from which the row reads as
// nothing (store.Live), deleted yet or not; a row written before 0008 has
// none and reads through fresh_at.
//
// Build the pool with ConfigurePool, so that a call whose context ends (a
// store timeout) is cancelled on the server with a cancel request and its
// connection kept, rather than closed (pgx's default), which would make the
// next call pay for a new session. Values the database refuses (SQLSTATE
// class 22, 54000) are store.ErrInvalidValue: the request's fault, never a
// sign of an outage.
//
// The store is also a store.LeaseStore (lease.go, migration 0003): one
// PL/pgSQL call per operation, acquires and releases of a key serialised by
// a transaction-scoped advisory lock, fencing tokens from one sequence, a
// NOTIFY on channel sluice_lease for releases someone may wait for, and
// sluice_lease_fence (Fence in Go) to fence the user's own SQL.
package pgstore
