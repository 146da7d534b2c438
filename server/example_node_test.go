package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/server"
)

// TestTypeScriptWorkerExample runs examples/typescript/worker.mjs, the
// fetch-only worker loop, against a real server and an upstream whose first
// answer is 429 with Retry-After: 1. It needs node (20 or later) on PATH
// and is skipped without it.
func TestTypeScriptWorkerExample(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH")
	}
	var (
		mu    sync.Mutex
		calls []time.Time
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		calls = append(calls, time.Now())
		n := len(calls)
		mu.Unlock()
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer up.Close()
	oc, err := outbound.New(outbound.Config{})
	require.NoError(t, err)
	b := setup(t, server.Config{Outbound: oc})
	api := httptest.NewServer(b.h)
	defer api.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "../examples/typescript/worker.mjs")
	cmd.Env = append(cmd.Environ(), "SLUICE_URL="+api.URL, "UPSTREAM_URL="+up.URL, "KEY=example-upstream", "CALLS=3")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "worker output:\n%s", out)
	lines := string(out)
	require.Contains(t, lines, `"throttled":true`)
	require.Contains(t, lines, `{"event":"done","successes":3}`)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, calls, 4, "one 429, then three successes: %s", lines)
	require.False(t, calls[1].Before(calls[0].Add(time.Second)),
		"the worker called the upstream %v after the 429, inside its Retry-After: 1\n%s", calls[1].Sub(calls[0]), lines)
	require.True(t, strings.Count(lines, "\n") >= 5, lines)
}
