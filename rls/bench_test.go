package rls

import (
	"context"
	"strconv"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/sluicerl/sluice/internal/testenv"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/redisstore"
)

const benchConfig = "domain: b\ndescriptors:\n  - key: client\n    rate_limit: {unit: second, requests_per_unit: 100000}\n"

func benchService(b *testing.B, st store.RateStore) {
	rules, err := Parse(File{Name: "b.yaml", Data: []byte(benchConfig)})
	if err != nil {
		b.Fatal(err)
	}
	bb := setupRules(b, rules, st, nil, Config{})
	reqs := make([]*pb.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = &pb.RateLimitRequest{Domain: "b", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("client", "c"+strconv.Itoa(i))}}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := bb.svc.ShouldRateLimit(context.Background(), reqs[i%len(reqs)]); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

func BenchmarkShouldRateLimitMemory(b *testing.B) {
	benchService(b, memstore.New(memstore.Config{}))
}

func BenchmarkShouldRateLimitRedis(b *testing.B) {
	opts, err := redis.ParseURL(testenv.RedisURL())
	if err != nil {
		b.Fatal(err)
	}
	client := redis.NewClient(opts)
	b.Cleanup(func() { _ = client.Close() })
	if err := client.Ping(context.Background()).Err(); err != nil {
		testenv.Unreachable(b, "Redis", err)
	}
	const prefix = "sluicetest:rlsbench:"
	b.Cleanup(func() {
		ctx := context.Background()
		iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			client.Del(ctx, iter.Val())
		}
	})
	st, err := redisstore.New(client, redisstore.Config{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	benchService(b, st)
}
