package sqlitestore_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/jobtest"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

func TestJobConformance(t *testing.T) {
	t.Parallel()
	jobtest.Run(t, func(t *testing.T) store.JobStore {
		s, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "jobs.db"), sqlitestore.Config{})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		return s
	})
}
