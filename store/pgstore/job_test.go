package pgstore_test

import (
	"testing"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/jobtest"
)

func TestJobConformance(t *testing.T) {
	t.Parallel()
	jobtest.Run(t, func(t *testing.T) store.JobStore { return setup(t).store })
}
