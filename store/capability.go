package store

// Capabilities a backend may have beyond the contract, as io.WriterTo is for
// an io.Reader: a facade checks for the capability, never for a backend's
// type, so no facade names a backend (CONTRIBUTING, layers).

// PreparedTaker is a capability of a RateStore that decides in process and
// never blocks (store/memstore): a Take on a limit validated once by
// Prepare, at the store's clock, with no context and no MaxDelay. Its
// decisions must be exactly Take's. limiter.Handle uses it for Allow when
// its store has it, skipping the limit's validation and the TakeParams copy
// on every call.
type PreparedTaker interface {
	DecidePrepared(key string, l *Prepared, cost int64) (Result, error)
}

// LeaseKeeper is a capability of a RateStore that can keep leases on its
// own state without being a LeaseStore itself (store/memstore): KeepLeases
// returns a new LeaseStore whose mixed operations (RateLeaseStore) charge
// this store's rates. A facade given a RateStore and no lease store uses it,
// so that rates and a lease taken together stay one atomic operation.
type LeaseKeeper interface {
	KeepLeases() LeaseStore
}

// RateSharer is a capability of a store that charges rate limits: Rates
// returns the RateStore whose state those charges are (the store itself
// for a backend that keeps rates and leases; for a lease store built on a
// rate store, that rate store). Two stores share their rates exactly when
// their Rates are equal, so Rates must return a comparable value, such as a
// pointer. limiter.New uses it to refuse a lease store that would charge
// mixed requests' rates where Allow never looks (ErrLeaseStoreMismatch).
type RateSharer interface {
	Rates() RateStore
}
