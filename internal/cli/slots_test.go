package cli_test

import (
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/sluicerl/sluice/internal/cli"
)

func TestSlotsCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "slots.db")
	r := run(t, nil, "slots", "config", "default", "--max", "100", "--window", "PT4S", "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "config default version 1: at most 100 per PT4S")

	r = run(t, map[string]string{"SLUICE_DB": db}, "slots", "assign", "test-1", "--at", "2025-06-01T12:00:00Z")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `"eventId":"test-1"`)
	require.Contains(t, r.stdout, `"windowStart":"2025-06-01T12:00:00Z"`)
	require.Contains(t, r.stdout, `"status":"NEW"`)

	// 350 events from CSV (with a header) and 100 from JSON lines, one of
	// them already assigned.
	var csvb strings.Builder
	csvb.WriteString("eventId,requestedTime\n")
	for i := range 350 {
		fmt.Fprintf(&csvb, "c-%d,2025-06-01T12:00:00Z\n", i)
	}
	csvPath := filepath.Join(dir, "feed.csv")
	require.NoError(t, os.WriteFile(csvPath, []byte(csvb.String()), 0o600))
	r = run(t, nil, "slots", "load", csvPath, "--db", db, "--batch", "100")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "350 events in")
	require.Contains(t, r.stdout, "350 new, 0 existing, 0 exhausted")
	require.NotContains(t, r.stderr, "\r", "no progress bar redrawn into a stderr that is not a terminal")

	var jl strings.Builder
	jl.WriteString(`{"eventId":"test-1","requestedTime":"2025-06-01T12:00:00Z"}` + "\n")
	for i := range 99 {
		fmt.Fprintf(&jl, `{"eventId":"j-%d","requestedTime":"2025-06-01T13:00:00Z"}`+"\n", i)
	}
	jlPath := filepath.Join(dir, "feed.jsonl")
	require.NoError(t, os.WriteFile(jlPath, []byte(jl.String()), 0o600))
	r = run(t, nil, "slots", "load", jlPath, "--db", db, "--quiet")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "99 new, 1 existing, 0 exhausted")

	r = run(t, nil, "slots", "verify", "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "450 slots in")
	require.Contains(t, r.stdout, "ok:")

	// Break a counter behind the store's back: verify says so, exit 1.
	raw, err := sql.Open("sqlite", filepath.Join(dir, "slots.db"))
	require.NoError(t, err)
	_, err = raw.Exec(`UPDATE sluice_slot_windows SET slot_count = slot_count + 1
WHERE window_start = (SELECT min(window_start) FROM sluice_slot_windows)`)
	require.NoError(t, err)
	require.NoError(t, raw.Close())
	r = run(t, nil, "slots", "verify", "--db", db)
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stdout, "PROBLEM: config \"default\" window 2025-06-01T12:00:00Z: counter says 101 slots, 100 rows")
	require.Contains(t, r.stdout, "over the largest maxPerWindow 100")
}

func TestSlotsBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "slots.db")
	bad := filepath.Join(dir, "bad.csv")
	require.NoError(t, os.WriteFile(bad, []byte("a,2025-06-01T12:00:00Z\nb,yesterday\n"), 0o600))
	noID := filepath.Join(dir, "noid.csv")
	require.NoError(t, os.WriteFile(noID, []byte("eventId,requestedTime\na,2025-06-01T12:00:00Z\n,2025-06-01T12:00:00Z\n"), 0o600))
	early := filepath.Join(dir, "early.jsonl")
	require.NoError(t, os.WriteFile(early, []byte(`{"eventId":"a","requestedTime":"2025-06-01T12:00:00Z"}
{"eventId":"b","requestedTime":"1969-12-31T23:59:59Z"}
`), 0o600))
	long := filepath.Join(dir, "long.jsonl")
	require.NoError(t, os.WriteFile(long, []byte(`{"eventId":"a","requestedTime":"2025-06-01T12:00:00Z"}
{"eventId":"`+strings.Repeat("b", 2<<20)+`"}
`), 0o600))
	trailing := filepath.Join(dir, "trailing.jsonl")
	require.NoError(t, os.WriteFile(trailing, []byte(`{"eventId":"a","requestedTime":"2025-06-01T12:00:00Z"}

{"eventId":"b","requestedTime":"2025-06-01T12:00:00Z"} {"eventId":"c"}
`), 0o600))
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"slots", "config", "x", "--max", "1", "--window", "4s", "--db", db}, cli.ExitUsage, "invalid --window"},
		{[]string{"slots", "config", "x", "--max", "0", "--window", "PT4S", "--db", db}, cli.ExitUsage, "maxPerWindow must be from 1"},
		{[]string{"slots", "assign", "e", "--at", "noon", "--db", db}, cli.ExitUsage, "invalid --at"},
		{[]string{"slots", "assign", "e", "--at", "2025-06-01T12:00:00Z", "--config", "nope", "--db", db}, cli.ExitFailure, "no active slot config"},
		{[]string{"slots", "load", bad, "--db", db}, cli.ExitFailure, "bad.csv:2: requestedTime \"yesterday\""},
		{[]string{"slots", "load", bad, "--db", db, "--batch", "0"}, cli.ExitUsage, "invalid --batch"},
		{[]string{"slots", "load", noID, "--db", db}, cli.ExitFailure, "noid.csv:3: invalid slot event: event id is empty"},
		{[]string{"slots", "load", early, "--db", db}, cli.ExitFailure, "early.jsonl:2: invalid slot event \"b\": requested time 1969-12-31T23:59:59Z is outside"},
		{[]string{"slots", "load", trailing, "--db", db}, cli.ExitFailure, "trailing.jsonl:3: data after the JSON object"},
		{[]string{"slots", "load", long, "--db", db}, cli.ExitFailure, "long.jsonl:2: bufio.Scanner: token too long"},
		{[]string{"slots", "verify", "--db", "redis://127.0.0.1:6379"}, cli.ExitUsage, "records need sqlite:PATH or postgres://"},
	} {
		r := run(t, nil, tc.args...)
		require.Equal(t, tc.code, r.code, "%v: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.want, tc.args)
	}
}

// TestServeSlotsSeedVerification: the seed's verification steps 4 and 5,
// verbatim, against 'sluice serve' on its records database; the slot is
// still there after a restart and 'slots verify' agrees.
func TestServeSlotsSeedVerification(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "records.db")
	s := startServe(t, nil, "--addr", "127.0.0.1:0", "--db", db)
	post := func(path, body string) (int, string) {
		resp, err := http.Post("http://"+s.addr+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, body := post("/admin/rate-limit/config", `{"configName":"default","maxPerWindow":100,"windowSize":"PT4S"}`)
	require.Equal(t, http.StatusCreated, code, body)
	code, body = post("/api/v1/slots", `{"eventId":"test-1","configName":"default","requestedTime":"2025-06-01T12:00:00Z"}`)
	require.Equal(t, http.StatusCreated, code, body)
	require.Contains(t, body, `"windowStart":"2025-06-01T12:00:00Z"`)
	require.Equal(t, 0, s.stop(t))

	s = startServe(t, nil, "--addr", "127.0.0.1:0", "--db", db)
	resp, err := http.Get("http://" + s.addr + "/api/v1/slots/test-1")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(b), `"status":"EXISTING"`)
	require.Equal(t, 0, s.stop(t))
	r := run(t, nil, "slots", "verify", "--db", db)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "1 slots in 1 windows of 1 configs")
}

// TestSlotsOverServer: slots config, load and verify with --server go
// through a running 'sluice serve' (started here, with tokens) and its
// records database, with --token and --output json or table; a token
// without scope admin is refused with the server's 403.
func TestSlotsOverServer(t *testing.T) {
	t.Parallel()
	admin, adminLine := mint(t, "ops", "*")
	taker, takerLine := mint(t, "taker", "take")
	tokens := writeFile(t, "tokens", "# name scopes hash\n"+adminLine+"\n"+takerLine+"\n")
	config := writeFile(t, "p.yaml", reloadPolicies)
	s := startServe(t, nil, "--addr", "127.0.0.1:0", "--config", config, "--tokens", tokens, "--watch=false")
	server := "http://" + s.addr

	r := run(t, nil, "slots", "config", "feed", "--max", "2", "--window", "PT4S", "--server", server, "--token", admin)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `"configName":"feed"`)
	r = run(t, map[string]string{"SLUICE_TOKEN": admin}, "slots", "config", "feed", "--max", "3", "--window", "PT4S",
		"--headroom", "50", "--server", server, "--output", "table")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^version\s+2$`, r.stdout)
	r = run(t, nil, "slots", "config", "feed", "--max", "3", "--window", "PT4S", "--server", server, "--token", taker)
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stderr, "(403)")
	r = run(t, nil, "slots", "config", "feed", "--max", "3", "--window", "PT4S", "--server", server)
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stderr, "(401)")

	// 7 events in batches of 2: one window holds 3.
	var csv strings.Builder
	csv.WriteString("eventId,requestedTime\n")
	for i := range 7 {
		fmt.Fprintf(&csv, "e%d,2025-06-01T12:00:00Z\n", i)
	}
	feed := writeFile(t, "feed.csv", csv.String())
	r = run(t, nil, "slots", "load", feed, "--config", "feed", "--batch", "2", "--server", server, "--token", admin)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.JSONEq(t, `{"configName":"feed","events":7,"assigned":7,"existing":0,"exhausted":0}`, r.stdout)
	r = run(t, nil, "slots", "load", feed, "--config", "feed", "--server", server, "--token", admin, "--output", "table")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^existing\s+7$`, r.stdout)
	r = run(t, nil, "slots", "load", feed, "--config", "nope", "--server", server, "--token", admin)
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stderr, "slots load: events 1 to 7")
	require.Contains(t, r.stderr, "(422)")

	r = run(t, nil, "slots", "verify", "--server", server, "--token", admin)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.JSONEq(t, `{"ok":true,"configs":1,"windows":3,"slots":7,"problems":[]}`, r.stdout)
	r = run(t, nil, "slots", "verify", "--server", server, "--token", admin, "--output", "table")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^ok\s+true$`, r.stdout)
	r = run(t, nil, "slots", "verify", "--server", server, "--token", taker)
	require.Equal(t, cli.ExitFailure, r.code)
	require.Contains(t, r.stderr, "(403)")

	// Bad flags name what is wrong, before any request.
	r = run(t, nil, "slots", "verify", "--server", "ftp://x", "--token", admin)
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, `invalid --server "ftp://x"`)
	r = run(t, nil, "slots", "verify", "--server", server, "--output", "yaml")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, `invalid --output "yaml"`)
}
