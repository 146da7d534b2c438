package lease_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicerl/sluice/lease"
	"github.com/sluicerl/sluice/store"
)

func ExampleLeaser_Acquire() {
	ctx := context.Background()
	l, err := lease.New(lease.Config{}) // leases in memory
	if err != nil {
		panic(err)
	}
	p := lease.Params{Name: "jobs", Key: "job-7", Permits: 1, TTL: 10 * time.Second}
	a, _, _ := l.Acquire(ctx, p)
	b, res, _ := l.Acquire(ctx, p)
	fmt.Println("first:", a != nil, "second:", b != nil, "held:", res.Held)

	fmt.Println("write:", a.Write(ctx, "cursor", []byte("page-42")))
	_ = a.Release(ctx)
	err = a.Write(ctx, "cursor", []byte("page-43"))
	fmt.Println("after release:", errors.Is(err, store.ErrStaleToken), errors.Is(a.Err(), lease.ErrReleased))
	// Output:
	// first: true second: false held: 1
	// write: <nil>
	// after release: true true
}
