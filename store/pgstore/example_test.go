package pgstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/pgstore"
)

// Every process that points a Store at the same database shares the limit.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/app?sslmode=disable")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	// Usually `sluice migrate up` at deploy time; safe from every replica.
	if _, err := pgstore.Migrate(ctx, pool); err != nil {
		panic(err)
	}
	s, err := pgstore.New(pool, pgstore.Config{})
	if err != nil {
		panic(err)
	}
	l := store.Limit{Name: "orders", Rate: 10, Period: 10 * time.Second}
	res, err := s.Take(ctx, store.TakeParams{Key: "account-42", Limit: l, Cost: 1})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Allowed)
}
