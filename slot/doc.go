// Package slot books future execution times under a capacity limit (seed
// 003): each event gets a time so that no window of a config's WindowSize
// holds more than MaxPerWindow events, at or after the time it asked for.
//
// A Scheduler works over a store.SlotStore (store/pgstore to share the
// schedule between processes, store/sqlitestore embedded and durable,
// store/memstore in memory by default). It adds what the
// store leaves to its caller: named, versioned configs cached for a few
// seconds (with an explicit Flush, as the seed's admin API needs), the
// jitter that places events inside their windows, and the batch limits.
//
//   - Assign gives one event a slot, or the slot it already has (idempotent
//     by event id, also under concurrent duplicates).
//   - AssignBatch does the same for thousands of events in a few round
//     trips, with one result per event.
//   - Verify checks the invariants on the live database: no window over its
//     maximum, counters equal to the rows, every slot inside its window.
//
// Times are whole microseconds; a requested time between two is rounded
// up. A config name keeps its window size across versions (the versions
// share the window counters), so PutConfig refuses a different one.
//
// Errors: ErrConfigNotFound (no active config of that name),
// store.ErrExhausted (no window within the headroom had room),
// store.ErrInvalidEvent and store.ErrInvalidSlotConfig for bad input.
package slot
