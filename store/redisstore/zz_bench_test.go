package redisstore

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluicerl/sluice/store"
)

func BenchmarkZZ(b *testing.B) {
	c := single(b)
	ctx := context.Background()
	s := newStore(b, c, Config{})
	key, _ := rateKey(s.Prefix(), "k", "bench")
	min := redis.NewScript(`local tm = redis.call('TIME')
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], '1893456000000000', 'PXAT', 1893456000000)
return {1,2,3,4,5,6,7}`)
	bare := redis.NewScript("return 1")
	for i := 0; i < 3; i++ {
		b.Run("take", func(b *testing.B) {
			for b.Loop() {
				s.Take(ctx, store.TakeParams{Key: "k", Limit: benchLimit, Cost: 1})
			}
		})
		b.Run("evalsha-rate", func(b *testing.B) {
			for b.Loop() {
				if err := rateScript.Run(ctx, c, []string{key}, "t", 0, 0, 0, 1, 1000000, 1).Err(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("evalsha-min", func(b *testing.B) {
			for b.Loop() {
				if err := min.Run(ctx, c, []string{key}, "t", 0, 0, 0, 1, 1000000, 1).Err(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("evalsha-bare", func(b *testing.B) {
			for b.Loop() {
				if err := bare.Run(ctx, c, []string{key}).Err(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("get", func(b *testing.B) {
			for b.Loop() {
				c.Get(ctx, key)
			}
		})
	}
}
