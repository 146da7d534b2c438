package outbound_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/storetest"
)

// TestDoRefusesHostileKeys: a key that breaks the identifier rule is an
// error matching store.ErrInvalidID, fn never runs, and no key state is
// made for it.
func TestDoRefusesHostileKeys(t *testing.T) {
	t.Parallel()
	c, err := outbound.New(outbound.Config{Burst: 100})
	require.NoError(t, err)
	for _, bad := range storetest.HostileIDs() {
		err := c.Do(t.Context(), bad, nil, func(context.Context) error {
			t.Fatalf("fn ran for key %q", bad)
			return nil
		})
		require.ErrorIs(t, err, store.ErrInvalidID, "%q", bad)
	}
	require.Empty(t, c.Snapshot(0).Keys)
}
