package outbound

import (
	"errors"
	"time"

	"github.com/sluicerl/sluice/signal"
)

// errBudget marks a retry refused by the retry budget.
var errBudget = errors.New("outbound: retry budget exhausted")

var errNoRetry = errors.New("outbound: no retry")

// policy holds the breaker and retry settings every key starts from.
type policy struct{}

func newPolicy(Config) (policy, error) { return policy{}, nil }

// keyPolicy is one key's breaker and retry budget.
type keyPolicy struct{}

func (policy) newKey() *keyPolicy { return &keyPolicy{} }

// allow is the breaker's first step; the returned func records the outcome.
func (k *keyPolicy) allow(int64) (func(*signal.Report), error) {
	return func(*signal.Report) {}, nil
}

// retry returns the delay before attempt n+1, or an error when there is none.
func (k *keyPolicy) retry(int, *signal.Report, bool, int64) (time.Duration, error) {
	return 0, errNoRetry
}

// BreakerSnapshot is a key's circuit breaker state.
type BreakerSnapshot struct {
	State string `json:"state"`
}

func (k *keyPolicy) snapshot(int64) BreakerSnapshot { return BreakerSnapshot{State: "closed"} }
