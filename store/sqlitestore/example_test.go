package sqlitestore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

// Limits kept in a file survive a restart: what was taken before is still
// taken after.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "sluice-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	path := filepath.Join(dir, "state.db")
	l := store.Limit{Name: "api", Rate: 10, Period: time.Hour}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) // tests pin the clock

	s, err := sqlitestore.Open(ctx, path, sqlitestore.Config{})
	if err != nil {
		panic(err)
	}
	res, err := s.Take(ctx, store.TakeParams{Key: "tenant-1", Limit: l, Cost: 4, Now: now})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Allowed, res.Remaining)
	_ = s.Close()

	s, err = sqlitestore.Open(ctx, path, sqlitestore.Config{})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	res, err = s.Take(ctx, store.TakeParams{Key: "tenant-1", Limit: l, Cost: 7, Now: now})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Allowed, res.Remaining, res.RetryAfter)
	// Output:
	// true 6
	// false 6 6m0s
}
