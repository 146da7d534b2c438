package memstore_test

import (
	"testing"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/slottest"
)

func TestSlotConformance(t *testing.T) {
	t.Parallel()
	slottest.Run(t, func(*testing.T) store.SlotStore { return memstore.NewSlots(nil) })
}
