package job

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicerl/sluice/store"
)

var (
	// ErrInvalidConfig is wrapped by New for a Config it cannot use; the
	// message names the field.
	ErrInvalidConfig = errors.New("job: invalid config")
	// ErrNoHandler: a claimed job's type has no handler. Permanent.
	ErrNoHandler = errors.New("job: no handler for the job's type")
	// ErrBudgetExhausted is matched by every *GapError.
	ErrBudgetExhausted = errors.New("job: run budget exhausted")
	// ErrSourcePressure is matched by every *PressureError.
	ErrSourcePressure = errors.New("job: source pressure")
	// ErrLeaseLost: the run's lease was taken over (its token is stale);
	// nothing more it writes is kept. It matches store.ErrStaleToken too.
	ErrLeaseLost = fmt.Errorf("job: lease lost: %w", store.ErrStaleToken)
)

// GapError ends a run that ran out of a budget of its envelope, at a slice
// boundary: the worker records a resumable gap with the committed cursor
// and runs the job again soon. It is not a failure and not source
// pressure. Commit returns it; handlers return it as they got it.
type GapError struct {
	// Reason is store.GapRequestCap, store.GapWallClock or
	// store.GapRetryBudget.
	Reason string
	// CatchUp says the run was committing the catch-up bookmark, which
	// the gap record then quotes.
	CatchUp bool
}

func (e *GapError) Error() string { return "job: run budget exhausted: " + e.Reason }

// Is makes errors.Is(err, ErrBudgetExhausted) true.
func (e *GapError) Is(target error) bool { return target == ErrBudgetExhausted }

// PressureError ends a run because the provider pushes back (a 429 storm,
// Retry-After, an open breaker, a THROTTLED answer, a ban): the worker
// parks the job until Wait has passed, counting no failure and using no
// attempt. Run.Call returns it; a handler that detects throttling itself
// returns one from Pressure.
type PressureError struct {
	// Reason is in the source-pressure set (store.PressureRateLimited,
	// ...).
	Reason string
	// Wait is how long the provider asked to wait; 0 means the worker's
	// Config.PressureWait.
	Wait time.Duration
	// Err is the provider's answer, if any.
	Err error
}

// Pressure returns a *PressureError for a handler that detected throttling
// itself (seed 004's GraphQL THROTTLED: wait = cost deficit / restore rate).
func Pressure(reason string, wait time.Duration, err error) error {
	return &PressureError{Reason: reason, Wait: wait, Err: err}
}

func (e *PressureError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("job: source pressure (%s, wait %s): %v", e.Reason, e.Wait, e.Err)
	}
	return fmt.Sprintf("job: source pressure (%s, wait %s)", e.Reason, e.Wait)
}

// Is makes errors.Is(err, ErrSourcePressure) true.
func (e *PressureError) Is(target error) bool { return target == ErrSourcePressure }

// Unwrap returns the provider's answer.
func (e *PressureError) Unwrap() error { return e.Err }

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as permanent: the worker counts the failure and
// disables the job instead of retrying it (a bad symbol, a revoked key).
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err was marked by Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
