// Package sqlitestore keeps rate state in a SQLite file, so that one machine
// keeps its limits across restarts, and every process on it that opens the
// same file shares them.
//
// It runs on modernc.org/sqlite (pure Go, no cgo) with WAL journaling,
// synchronous=FULL and a busy timeout. Every operation is one BEGIN
// IMMEDIATE transaction: it takes the write lock before it reads, runs the
// same Go arithmetic as memstore (store.Eval, store.EvalSettle,
// store.EvalSync) on the state it read, writes, and commits before it
// answers. An acknowledged decision is therefore on disk: neither kill -9 nor
// a power cut loses it. Denials and peeks write nothing. A row's fresh_at
// is exact: from it on the row reads as nothing (store.Live), whether or not
// Cleanup has deleted it.
//
// The store clock is the process clock (Config.Clock), clamped never to run
// backwards, and never below a high-water mark kept in the file: the latest
// decision time that changed state. After a restart, or in another process
// sharing the file, time never reads earlier than a decision already
// stored.
//
// Within a process, one connection does all the work, so goroutines queue
// in Go rather than spin on SQLite's busy handler; across processes they
// wait on busy_timeout, and a write refused as busy asks again for up to
// Config.MaxBusyWait, since SQLite's busy handler polls rather than queues
// and can pass one process over while others take turns with the lock.
//
// The store is also a store.LeaseStore (lease.go, migration 0003), deciding
// in Go with store.LeaseState inside the same group-committed transactions;
// fencing tokens come from one counter per file, never reset. Releases are
// announced to WatchLease watchers of the same Store only.
//
// The store is also a store.JobStore (job.go, jobclaim.go; migrations 0005
// to 0008). A claim is one group-committed transaction with a fixed number
// of prepared statements, whatever it takes: the groups with a claimable
// job and their loads, the heads of the groups the fair rounds reach (one
// statement, walking sluice_jobs_group_order in claim order), the picks'
// leases, their runs. ClaimAndFinish (store.ClaimFinisher) writes a worker's
// finished runs, three statements for any number of them, in the same
// transaction, so that a worker's cycle pays for one commit. The claim's
// gate is asked before the transaction (it may call this store), about the
// connectors with claimable jobs and those of the finishes' jobs; only jobs
// of the connectors it allowed are claimed.
package sqlitestore
