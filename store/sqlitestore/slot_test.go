package sqlitestore_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/slottest"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

func TestSlotConformance(t *testing.T) {
	t.Parallel()
	slottest.Run(t, func(t *testing.T) store.SlotStore {
		s, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "slots.db"), sqlitestore.Config{})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		return s
	})
}
