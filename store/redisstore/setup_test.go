package redisstore

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// The tests talk to a real Redis at SLUICE_TEST_REDIS_URL and to a real
// 3-node Redis Cluster: the one SLUICE_TEST_REDIS_CLUSTER names
// (comma-separated addresses), or else one that scripts/redis-cluster.sh
// starts for this run alone, on free loopback ports and in a state
// directory of its own, and stops at its end (or, if the run is killed,
// its watchdog does), so that runs at once never share one. Without them
// the tests skip, saying how to run them, unless SLUICE_INTEGRATION=1 (set
// by `make test`), under which they fail.

const clusterScript = "../../scripts/redis-cluster.sh"

var (
	singleOnce   sync.Once
	singleClient *redis.Client
	singleErr    error

	clusterOnce  sync.Once
	clusterAddrs []string
	clusterErr   error
	clusterDir   string // the state directory of the cluster this run started
)

// clusterScriptCmd returns the cluster script, run with arg on this run's
// state directory.
func clusterScriptCmd(arg string) *exec.Cmd {
	cmd := exec.Command(clusterScript, arg)
	cmd.Env = append(os.Environ(),
		"SLUICE_REDIS_CLUSTER_DIR="+clusterDir,
		"SLUICE_REDIS_CLUSTER_OWNER="+strconv.Itoa(os.Getpid()))
	return cmd
}

func TestMain(m *testing.M) {
	code := m.Run()
	if singleClient != nil {
		_ = singleClient.Close()
	}
	if clusterDir != "" {
		if out, err := clusterScriptCmd("stop").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "redisstore: stopping the test cluster in %s: %v\n%s", clusterDir, err, out)
		}
		_ = os.RemoveAll(clusterDir)
	}
	os.Exit(code)
}

// unavailable skips the test, or fails it under SLUICE_INTEGRATION=1.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("SLUICE_INTEGRATION") == "1" {
		t.Fatal(msg + " (SLUICE_INTEGRATION=1: integration tests must run)")
	}
	t.Skip(msg + "; run `make test` (which starts Redis), or start redis-server and set SLUICE_TEST_REDIS_URL (default redis://127.0.0.1:6379); " +
		"the cluster tests start a cluster with scripts/redis-cluster.sh unless SLUICE_TEST_REDIS_CLUSTER names one")
}

func testRedisURL() string {
	if url := os.Getenv("SLUICE_TEST_REDIS_URL"); url != "" {
		return url
	}
	return "redis://127.0.0.1:6379"
}

// single returns the shared client of the single test Redis.
func single(t testing.TB) *redis.Client {
	t.Helper()
	singleOnce.Do(func() {
		url := testRedisURL()
		opt, err := redis.ParseURL(url)
		if err != nil {
			singleErr = fmt.Errorf("SLUICE_TEST_REDIS_URL %q: %w", url, err)
			return
		}
		opt.PoolSize = 128
		c := redis.NewClient(opt)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := c.Ping(ctx).Err(); err != nil {
			_ = c.Close()
			singleErr = fmt.Errorf("redis at %s is unreachable: %w", url, err)
			return
		}
		singleClient = c
	})
	if singleErr != nil {
		unavailable(t, "%v", singleErr)
	}
	return singleClient
}

// clusterClient returns a new client of the test cluster, starting the
// cluster first if this run has to.
func clusterClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	clusterOnce.Do(func() {
		if v := os.Getenv("SLUICE_TEST_REDIS_CLUSTER"); v != "" {
			clusterAddrs = strings.Split(v, ",")
			return
		}
		if _, err := exec.LookPath("redis-server"); err != nil {
			clusterErr = fmt.Errorf("redis-server is not installed, so no test cluster can start (apt-get install redis-server, or set SLUICE_TEST_REDIS_CLUSTER)")
			return
		}
		dir, err := os.MkdirTemp("", "sluice-redis-cluster-")
		if err != nil {
			clusterErr = fmt.Errorf("a state directory for the test cluster: %w", err)
			return
		}
		clusterDir = dir
		var stderr bytes.Buffer
		cmd := clusterScriptCmd("start")
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			clusterErr = fmt.Errorf("%s start (in %s): %w: %s", clusterScript, dir, err, stderr.String())
			return
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		clusterAddrs = strings.Split(lines[len(lines)-1], ",")
	})
	if clusterErr != nil {
		unavailable(t, "%v", clusterErr)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: clusterAddrs, PoolSize: 64})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() }); err != nil {
		unavailable(t, "the test cluster at %v is unreachable: %v", clusterAddrs, err)
	}
	return c
}

// ringClient returns a new ring of two shards, both on the single test
// Redis: the ring routes by hash tag as it would across servers.
func ringClient(t testing.TB) *redis.Ring {
	t.Helper()
	addr := single(t).Options().Addr
	r := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr, "b": addr}, PoolSize: 64})
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// testPrefix returns a key prefix unique to one test.
func testPrefix() string { return fmt.Sprintf("sluicetest:%016x:", rand.Uint64()) }

// newStore returns a store on client whose keys carry a prefix of their
// own (cfg.Prefix, or a random one), and deletes those keys when the test
// ends.
func newStore(t testing.TB, client redis.UniversalClient, cfg Config) *Store {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = testPrefix()
	}
	s, err := New(client, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { deletePrefix(t, client, s.Prefix()) })
	return s
}

// keysWith returns every key starting with prefix (on every master of a
// cluster).
func keysWith(t testing.TB, client redis.UniversalClient, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	var (
		mu   sync.Mutex
		keys []string
	)
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			keys = append(keys, it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	var err error
	switch c := client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Ring:
		err = scan(ctx, single(t)) // every shard is the single test Redis
	case *redis.Client:
		err = scan(ctx, c)
	default:
		t.Fatalf("keysWith: unsupported client %T", client)
	}
	require.NoError(t, err)
	return keys
}

// deletePrefix deletes every key starting with prefix.
func deletePrefix(t testing.TB, client redis.UniversalClient, prefix string) {
	t.Helper()
	ctx := context.Background()
	for _, k := range keysWith(t, client, prefix) {
		// One key per DEL: a cluster refuses DEL across slots.
		require.NoError(t, client.Del(ctx, k).Err())
	}
}
