package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/redisstore"
)

// One account's exchange limits, taken all or nothing. The limits share the
// key "acct42", so they share a hash slot and this works on Redis Cluster
// too.
func ExampleStore_TakeAll() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	s, err := redisstore.New(rdb, redisstore.Config{})
	if err != nil {
		panic(err)
	}
	weight := store.Limit{Name: "binance-weight", Algorithm: store.FixedWindow, Rate: 1200, Period: time.Minute}
	orders := store.Limit{Name: "binance-orders", Algorithm: store.FixedWindow, Rate: 50, Period: 10 * time.Second}
	res, err := s.TakeAll(context.Background(), store.TakeAllParams{Items: []store.Item{
		{Key: "acct42", Limit: weight, Cost: 4},
		{Key: "acct42", Limit: orders, Cost: 1},
	}})
	if err != nil {
		panic(err) // the store could not answer: apply the outage policy
	}
	if !res.Allowed {
		for i, r := range res.Results {
			if !r.Allowed {
				fmt.Printf("limit %d refused, retry in %s\n", i, r.RetryAfter)
			}
		}
	}
}
