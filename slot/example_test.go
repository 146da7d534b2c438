package slot_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicerl/sluice/slot"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

// The seed's scenario in small: events all asking for the same instant are
// spread over windows of 4 seconds, at most 2 per window.
func ExampleScheduler_AssignBatch() {
	dir, _ := os.MkdirTemp("", "slot-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "slots.db"), sqlitestore.Config{})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	s, _ := slot.New(slot.Config{Store: st})
	window, _ := store.ParseWindowSize("PT4S")
	if _, err := s.PutConfig(ctx, store.SlotConfig{Name: "default", MaxPerWindow: 2, WindowSize: window}); err != nil {
		panic(err)
	}
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	var evs []slot.Event
	for _, id := range []string{"a", "b", "c", "d", "e", "a"} {
		evs = append(evs, slot.Event{EventID: id, RequestedTime: at})
	}
	res, err := s.AssignBatch(ctx, "default", evs)
	if err != nil {
		panic(err)
	}
	for _, r := range res {
		fmt.Println(r.Slot.EventID, r.Slot.WindowStart.Format(time.TimeOnly), r.Slot.Status)
	}
	// Output:
	// a 12:00:00 NEW
	// b 12:00:00 NEW
	// c 12:00:04 NEW
	// d 12:00:04 NEW
	// e 12:00:08 NEW
	// a 12:00:00 EXISTING
}
