package migration_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluicerl/sluice/store/migration"
)

// A command such as `sluice migrate up` opens the database by URL, applies
// what is pending and reports each step.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "sluice-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	m, err := migration.Open(ctx, "sqlite:"+filepath.Join(dir, "state.db"))
	if err != nil {
		panic(err)
	}
	defer m.Close()
	steps, err := m.Up(ctx)
	if err != nil {
		panic(err)
	}
	for _, s := range steps {
		fmt.Println(s.Direction, s.Version, s.Name)
	}
	status, err := m.Status(ctx)
	if err != nil {
		panic(err)
	}
	for _, s := range status {
		fmt.Println(s.Version, s.Name, s.Applied)
	}
	// Output:
	// up 1 rate_state
	// up 2 store_clock
	// up 3 leases
	// up 4 slots
	// up 5 jobs
	// up 6 job_claim_index
	// up 7 job_cron
	// up 8 job_hot_indexes
	// 1 rate_state true
	// 2 store_clock true
	// 3 leases true
	// 4 slots true
	// 5 jobs true
	// 6 job_claim_index true
	// 7 job_cron true
	// 8 job_hot_indexes true
}
