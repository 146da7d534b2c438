package store

import (
	"context"
	"fmt"
)

// JobFinisher is a JobStore that ends many held jobs' runs as successes in
// one operation: one round trip and one commit for the lot, so that a
// worker finishing many short jobs pays for one durable write, not one
// each. Every SQL backend and the in-memory one implement it; FinishAll
// uses it when a store has it.
type JobFinisher interface {
	// FinishJobs does what FinishJob does for each of ps, all in one
	// transaction. Each is fenced on its own: errs[i] is ps[i]'s outcome
	// (nil, ErrStaleToken or ErrJobNotFound, with nothing written for
	// it), and a stale one does not hold the others back. err reports a
	// batch that failed as a whole (invalid params or a store error):
	// then nothing was written and errs is nil. When FinishJobs returns,
	// every nil errs[i] is durable.
	FinishJobs(ctx context.Context, ps []EndParams) (errs []error, err error)
}

// CheckFinishes validates a batch of finishes: each as CheckEnd does (the
// messages name the entry), at most MaxClaim of them.
func CheckFinishes(ps []EndParams) error {
	if len(ps) > MaxClaim {
		return fmt.Errorf("%w: at most %d finishes in one batch, got %d", ErrInvalidJob, MaxClaim, len(ps))
	}
	for i := range ps {
		if err := CheckEnd(RunSucceeded, &ps[i]); err != nil {
			return fmt.Errorf("finishes[%d]: %w", i, err)
		}
	}
	return nil
}

// FinishAll finishes every one of ps: in one FinishJobs call when st is a
// JobFinisher, else one FinishJob each. errs and err are as FinishJobs
// returns them.
func FinishAll(ctx context.Context, st JobStore, ps []EndParams) (errs []error, err error) {
	if f, ok := st.(JobFinisher); ok {
		return f.FinishJobs(ctx, ps)
	}
	if err := CheckFinishes(ps); err != nil {
		return nil, err
	}
	errs = make([]error, len(ps))
	for i, p := range ps {
		errs[i] = st.FinishJob(ctx, p)
	}
	return errs, nil
}

// ClaimFinisher is a JobStore that can end runs as successes in the same
// transaction (the same commit) as its next claim, so that a worker that
// claims as often as its jobs end pays one durable write for both.
type ClaimFinisher interface {
	// ClaimAndFinish does what FinishJobs(fin) does and then what
	// ClaimJobs(p) does, in one transaction: the finishes are written
	// first, each fenced on its own (errs[i] as FinishJobs reports it),
	// and are written even when nothing is due. A non-nil err means
	// nothing was written: neither the finishes nor the claim.
	ClaimAndFinish(ctx context.Context, p ClaimParams, fin []EndParams) (claims []Claim, errs []error, err error)
}
