package cli_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/cli"
	"github.com/sluicerl/sluice/internal/testenv"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

const jobsYAML = `
connectors:
  - id: binance
    policies: [binance-weight]
    pairs: [BTC/USDT, ETH/USDT]
    timeframes: [1m]
    types: [ohlcv]
`

func TestJobsCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "jobs.db")
	file := writeFile(t, "jobs.yaml", jobsYAML)
	r := run(t, nil, "connectors", "import", file, "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "connectors: 1 created, 0 updated, 0 unchanged; jobs: 2 created, 0 updated, 0 unchanged")
	r = run(t, map[string]string{"SLUICE_DB": db}, "connectors", "import", file)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "connectors: 0 created, 0 updated, 1 unchanged; jobs: 0 created, 0 updated, 2 unchanged")

	r = run(t, nil, "connectors", "list", "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Equal(t, 1, strings.Count(r.stdout, "\n"))
	require.Contains(t, r.stdout, `"jobs_count":2`)
	r = run(t, nil, "jobs", "list", "--connector", "binance", "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `"id":"binance:BTC/USDT:1m:ohlcv"`)

	// A worker whose command writes two slices and commits after each.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr testenv.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, []string{"worker", "--db", db, "--type", "ohlcv", "--holder", "cli-worker",
			"--exec", `echo "commit ${SLUICE_JOB_CURSOR}a"; echo "commit ${SLUICE_JOB_CURSOR}ab"`}, cli.Options{Stdout: &stdout, Stderr: &stderr})
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		r = run(t, nil, "jobs", "get", "binance:ETH/USDT:1m:ohlcv", "--db", db)
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
		var j struct {
			Cursor        string `json:"cursor"`
			LastSuccessAt string `json:"last_success_at"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &j))
		if j.LastSuccessAt != "" {
			require.Equal(t, "ab", j.Cursor)
			break
		}
		require.False(t, time.Now().After(deadline), "the worker never finished the job: %s", stderr.String())
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		require.Equal(t, cli.ExitOK, code, stderr.String())
	case <-time.After(time.Minute):
		t.Fatal("the worker did not stop")
	}
	r = run(t, nil, "runs", "--job", "binance:ETH/USDT:1m:ohlcv", "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `"outcome":"succeeded"`)
	require.Contains(t, r.stdout, `"slices":2`)
	require.Contains(t, r.stdout, `"holder":"cli-worker"`)
	r = run(t, nil, "gaps", "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Empty(t, r.stdout)

	r = run(t, nil, "connectors", "pause", "binance", "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	r = run(t, nil, "connectors", "get", "binance", "--db", db)
	require.Contains(t, r.stdout, `"status":"paused"`)
	r = run(t, nil, "jobs", "trigger", "binance:ETH/USDT:1m:ohlcv", "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
}

func TestJobsCommandsBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "jobs.db")
	bad := writeFile(t, "bad.yaml", "connectors: [{id: binance, pairs: [BTC/USDT], timeframes: [1M], types: [ohlcv]}]")
	r := run(t, nil, "connectors", "import", bad, "--db", db)
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, `timeframe "1M"`)
	r = run(t, nil, "runs", "--after", "x", "--db", db)
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, "after must be a record id")
	r = run(t, nil, "worker", "--db", db)
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, "--exec and at least one --type are required")
	r = run(t, nil, "worker", "--db", db, "--type", "ohlcv", "--exec", "true", "--claim-ahead", "100000")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, "ClaimAhead must be at most")
	r = run(t, nil, "worker", "--db", db, "--type", "ohlcv", "--exec", "true", "--claim-ahead", "x")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, "claim-ahead")
	r = run(t, nil, "jobs", "get", "nope", "--db", db)
	require.NotEqual(t, cli.ExitOK, r.code)
	require.Contains(t, r.stderr, "no job with that id")
	r = run(t, nil, "jobs", "list", "--db", "redis://127.0.0.1:6379")
	require.Equal(t, cli.ExitUsage, r.code)
}

func TestJobsCronImportAndList(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "jobs.db")
	file := writeFile(t, "jobs.yaml", `
connectors:
  - id: shop
    pairs: [orders]
    timeframes: [1d]
    types: [export]
    cron: "30 2 * * *"
    time_zone: Europe/Berlin
`)
	r := run(t, nil, "connectors", "import", file, "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "jobs: 1 created")
	r = run(t, nil, "jobs", "list", "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `"cron":"30 2 * * *"`)
	require.Contains(t, r.stdout, `"time_zone":"Europe/Berlin"`)
	bad := writeFile(t, "bad.yaml", `connectors: [{id: shop, pairs: [o], timeframes: [1d], types: [export], cron: "30 25 * * *"}]`)
	r = run(t, nil, "connectors", "import", bad, "--db", db)
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, `cron "30 25 * * *"`)
}

func TestJobsGroupsCommands(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "jobs.db")
	file := writeFile(t, "jobs.yaml", jobsYAML)
	r := run(t, nil, "connectors", "import", file, "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	r = run(t, nil, "jobs", "groups", "list", "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Equal(t, `{"group":"binance","weight":1}`+"\n", r.stdout)
	r = run(t, nil, "jobs", "groups", "weight", "binance", "4", "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Equal(t, `{"group":"binance","weight":4}`+"\n", r.stdout)
	r = run(t, nil, "jobs", "groups", "weight", "shop-z", "2", "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	r = run(t, nil, "jobs", "groups", "list", "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Equal(t, `{"group":"binance","weight":4}`+"\n"+`{"group":"shop-z","weight":2}`+"\n", r.stdout)
	r = run(t, nil, "jobs", "groups", "list", "--after", "binance", "--db", db)
	require.Equal(t, `{"group":"shop-z","weight":2}`+"\n", r.stdout)
	for _, bad := range []string{"0", "-1", "1001", "1.5", "many"} {
		r = run(t, nil, "jobs", "groups", "weight", "--db", db, "--", "binance", bad)
		require.Equal(t, cli.ExitUsage, r.code, bad)
		require.Contains(t, r.stderr, "weight must be an integer from 1 to 1000", bad)
	}
	r = run(t, nil, "jobs", "groups", "weight", "a\x01b", "2", "--db", db)
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, "group key")
	r = run(t, nil, "jobs", "groups", "explode", "--db", db)
	require.Equal(t, cli.ExitUsage, r.code)
}

// TestWorkerGatedByConnectorPolicies: with --config and --state (as serve
// takes them), `sluice worker` asks the connector's policies before each
// claim: a connector whose policy is exhausted has its due jobs moved to
// when capacity returns, and none of them runs.
func TestWorkerGatedByConnectorPolicies(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "jobs.db")
	state := "sqlite:" + filepath.Join(dir, "state.db")
	policies := writeFile(t, "policies.yaml", "policies:\n  binance-weight:\n    rate: 1\n    period: 24h\n")
	file := writeFile(t, "jobs.yaml", jobsYAML)
	r := run(t, nil, "connectors", "import", file, "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)

	// Spend the connector's one unit a day in the shared state, as another
	// worker's Run.Call would (the key is the connector id).
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "state.db"), sqlitestore.Config{})
	require.NoError(t, err)
	pols, err := limiter.Parse("policies.yaml", []byte("policies:\n  binance-weight:\n    rate: 1\n    period: 24h\n"))
	require.NoError(t, err)
	lim, err := limiter.New(limiter.Config{Store: st, Policies: pols})
	require.NoError(t, err)
	d, err := lim.Allow(ctx, "binance-weight", "binance")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.NoError(t, st.Close())
	before := time.Now()

	wctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr testenv.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(wctx, []string{"worker", "--db", db, "--type", "ohlcv", "--config", policies, "--state", state,
			"--exec", `echo "commit x"`}, cli.Options{Stdout: &stdout, Stderr: &stderr})
	}()
	// Wait for the gate to move both jobs (an event: next_run_at changes).
	deadline := time.Now().Add(time.Minute)
	for {
		r = run(t, nil, "jobs", "list", "--db", db)
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
		moved := 0
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			var j struct {
				NextRunAt time.Time `json:"next_run_at"`
				Runs      int64     `json:"runs"`
			}
			require.NoError(t, json.Unmarshal([]byte(line), &j))
			require.Zero(t, j.Runs, "a job of an exhausted connector was claimed: %s", line)
			if j.NextRunAt.After(before.Add(time.Hour)) {
				require.True(t, j.NextRunAt.Before(before.Add(25*time.Hour)), "moved to when capacity returns (a day), not further: %s", line)
				moved++
			}
		}
		if moved == 2 {
			break
		}
		require.False(t, time.Now().After(deadline), "the worker never moved the jobs: %s", stderr.String())
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		require.Equal(t, cli.ExitOK, code, stderr.String())
	case <-time.After(time.Minute):
		t.Fatal("the worker did not stop")
	}
	r = run(t, nil, "runs", "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Empty(t, r.stdout, "nothing ran")

	r = run(t, nil, "worker", "--db", db, "--type", "ohlcv", "--exec", "true", "--config", filepath.Join(dir, "nope.yaml"))
	require.NotEqual(t, cli.ExitOK, r.code)
	require.Contains(t, r.stderr, "nope.yaml")
	r = run(t, nil, "worker", "--db", db, "--type", "ohlcv", "--exec", "true", "--state", "bogus:x", "--config", policies)
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, "--state")
}
