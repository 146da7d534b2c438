package cli_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/cli"
	"github.com/sluicerl/sluice/internal/testenv"
)

// hostilePolicies: "open" grants one take an hour and fails open, so a bad
// key mistaken for a store outage would be allowed; "bulk" holds one
// permit.
const hostilePolicies = `policies:
  open:
    rate: 1
    period: 1h
    on_store_outage: fail_open
  bulk:
    algorithm: concurrency
    permits: 1
    ttl: 30s
`

// hostileID is an identifier that breaks the identifier rule, as a JSON
// string literal (jsonLit, sent in bodies) and as the bytes it stands for
// (raw, sent percent-encoded in paths and queries).
type hostileID struct {
	name, jsonLit, raw string
}

func hostileIDs() []hostileID {
	long := strings.Repeat("k", 1000) // over every bound (keys 512, ids 256, names 128)
	return []hostileID{
		{"NUL", `"a\u0000b"`, "a\x00b"},
		{"raw invalid UTF-8", "\"a\xffb\"", "a\xffb"},
		{"encoded surrogate", "\"a\xed\xa0\x80b\"", "a\xed\xa0\x80b"},
		{"lone high surrogate escape", `"a\ud800b"`, "a\xed\xa0\x80b"},
		{"lone low surrogate escape", `"\udc00"`, "\xed\xb0\x80"},
		{"reversed surrogate pair", `"\udc00\ud800"`, "\xed\xb0\x80"},
		{"C0 control", `"a\u0001"`, "a\x01"},
		{"newline", `"a\nb"`, "a\nb"},
		{"tab", `"a\tb"`, "a\tb"},
		{"DEL", "\"a\x7f\"", "a\x7f"},
		{"C1 control", `"a\u0085"`, "a\u0085"},
		{"raw C1 control", "\"a\xc2\x85\"", "a\u0085"},
		{"oversized", `"` + long + `"`, long},
		{"900 KB", `"` + strings.Repeat("k", 900<<10) + `"`, long},
	}
}

// TestHostileIdentifiers sends identifiers that break the rule to every
// endpoint that takes one, on every backend, through a real sluice serve:
// each answer is a 422 whose errors[] points at the field, and nothing is
// charged or counted: no outage fallback, no store error, a normal take
// after them still has the policy's whole budget, no lease or slot taken.
func TestHostileIdentifiers(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"memory", "sqlite", "redis", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := filepath.Join(dir, "p.yaml")
			require.NoError(t, os.WriteFile(cfg, []byte(hostilePolicies), 0o600))
			var b [6]byte
			_, _ = rand.Read(b[:])
			uniq := "hostile-" + hex.EncodeToString(b[:])
			// A generous store timeout: on a busy machine a slow store must not
			// make the outage policy answer the normal takes below.
			args := []string{"--addr", "127.0.0.1:0", "--config", cfg, "--store-timeout", "10s"}
			env := map[string]string{}
			switch backend {
			case "memory":
				args = append(args, "--state", "memory:")
			case "sqlite":
				args = append(args, "--state", "sqlite:"+filepath.Join(dir, "state.db"))
			case "redis":
				raw := testenv.RedisURL()
				rc := redis.NewClient(mustRedisOptions(t, raw))
				t.Cleanup(func() {
					deleteRedisKeys(rc, "*"+uniq+"*")
					_ = rc.Close()
				})
				if err := rc.Ping(t.Context()).Err(); err != nil {
					testenv.Unreachable(t, "Redis at "+raw, err)
				}
				args = append(args, "--state", raw)
			case "postgres":
				schema := testenv.PostgresSchema(t, "hostile_")
				pg := testenv.WithSearchPath(testenv.PostgresURL(), schema)
				args = append(args, "--state", pg)
				env["SLUICE_DB"] = pg
			}
			s := startServe(t, env, args...)
			base := "http://" + s.addr
			client := &http.Client{Timeout: 30 * time.Second}
			do := func(method, path, body string) (int, string) {
				t.Helper()
				req, err := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
				require.NoError(t, err)
				if body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				resp, err := client.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				out, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				return resp.StatusCode, string(out)
			}

			code, _ := do("POST", "/admin/rate-limit/config", `{"configName":"one","maxPerWindow":1,"windowSize":"PT1H"}`)
			require.Equal(t, http.StatusCreated, code)
			at := `"requestedTime":"2030-01-01T00:00:00Z"`
			for _, h := range hostileIDs() {
				esc := url.PathEscape(h.raw)
				qesc := url.QueryEscape(h.raw)
				for _, tc := range []struct {
					method, path, body, pointer string
				}{
					{"POST", "/v1/take", `{"policy":"open","key":` + h.jsonLit + `}`, "#/key"},
					{"POST", "/v1/take", `{"items":[{"policy":"open","key":"` + uniq + `"},{"policy":"open","key":` + h.jsonLit + `}]}`, "#/items/1/key"},
					{"POST", "/v1/leases", `{"policy":"bulk","key":` + h.jsonLit + `}`, "#/key"},
					{"POST", "/v1/leases", `{"policy":"bulk","key":"` + uniq + `","holder":` + h.jsonLit + `}`, "#/holder"},
					{"POST", "/v1/leases", `{"policy":"bulk","key":"` + uniq + `","items":[{"policy":"open","key":` + h.jsonLit + `}]}`, "#/items/0/key"},
					{"GET", "/v1/leases?policy=bulk&key=" + qesc, "", "#/query/key"},
					{"POST", "/api/v1/slots", `{"eventId":` + h.jsonLit + `,"configName":"one",` + at + `}`, "#/eventId"},
					{"POST", "/api/v1/slots", `{"eventId":"` + uniq + `","configName":` + h.jsonLit + `,` + at + `}`, "#/configName"},
					{"POST", "/api/v1/slots/batch", `{"configName":"one","events":[{"eventId":"` + uniq + `",` + at + `},{"eventId":` + h.jsonLit + `,` + at + `}]}`, "#/events/1/eventId"},
					{"POST", "/api/v1/slots/batch", `{"configName":` + h.jsonLit + `,"events":[{"eventId":"` + uniq + `",` + at + `}]}`, "#/configName"},
					{"GET", "/api/v1/slots/" + esc, "", "#/path/eventId"},
					{"POST", "/admin/rate-limit/config", `{"configName":` + h.jsonLit + `,"maxPerWindow":1,"windowSize":"PT1H"}`, "#/configName"},
					{"GET", "/admin/rate-limit/config/" + esc, "", "#/path/name"},
					{"POST", "/admin/rate-limit/config/" + esc + "/deactivate", "", "#/path/name"},
					{"POST", "/admin/rate-limit/cache/flush?configName=" + qesc, "", "#/query/configName"},
				} {
					if h.name == "900 KB" && tc.body == "" {
						continue // paths and queries are bounded by the header limit
					}
					// Three times: an outage policy would have allowed them.
					for range 3 {
						code, body := do(tc.method, tc.path, tc.body)
						require.Equal(t, http.StatusUnprocessableEntity, code, "%s %s %.200s: %.300s", h.name, tc.method, tc.path, body)
						var p struct {
							Type   string
							Errors []struct{ Pointer string }
						}
						require.NoError(t, json.Unmarshal([]byte(body), &p))
						require.Equal(t, "urn:sluice:problem:invalid-request", p.Type, "%s %s", h.name, tc.path)
						require.NotEmpty(t, p.Errors, "%s %s", h.name, tc.path)
						require.Equal(t, tc.pointer, p.Errors[0].Pointer, "%s %s %.200s: %.300s", h.name, tc.method, tc.path, body)
					}
				}
			}

			// Nothing was charged: the refused all-or-nothing takes left
			// uniq its whole budget of one, and the next take is refused.
			code, body := do("POST", "/v1/take", `{"policy":"open","key":"`+uniq+`"}`)
			require.Equal(t, http.StatusOK, code, body)
			require.Contains(t, body, `"remaining":0`)
			code, _ = do("POST", "/v1/take", `{"policy":"open","key":"`+uniq+`"}`)
			require.Equal(t, http.StatusTooManyRequests, code)
			// No lease was taken: the one permit of uniq is free.
			code, body = do("GET", "/v1/leases?policy=bulk&key="+uniq, "")
			require.Equal(t, http.StatusOK, code, body)
			require.JSONEq(t, `{"leases":[]}`, body)
			code, body = do("POST", "/v1/leases", `{"policy":"bulk","key":"`+uniq+`"}`)
			require.Equal(t, http.StatusCreated, code, body)
			// No slot was taken: the first window's one slot is free, and
			// no batch assigned uniq.
			code, body = do("GET", "/api/v1/slots/"+uniq, "")
			require.Equal(t, http.StatusNotFound, code, body)
			code, body = do("POST", "/api/v1/slots", `{"eventId":"`+uniq+`","configName":"one",`+at+`}`)
			require.Equal(t, http.StatusCreated, code, body)
			require.Contains(t, body, `"windowStart":"2030-01-01T00:00:00Z"`)

			// No outage fallback, no store error.
			code, metrics := do("GET", "/metrics", "")
			require.Equal(t, http.StatusOK, code)
			require.NotRegexp(t, regexp.MustCompile(`(?m)^sluice_store_fallback_total\{.*\} [1-9]`), metrics)
			require.Regexp(t, regexp.MustCompile(`(?m)^sluice_decisions_total\{policy="open",result="allowed"\} 1$`), metrics)
			require.Equal(t, 0, s.stop(t))
			require.NotContains(t, s.stderr.String(), "store failed")
			require.NotContains(t, s.stderr.String(), "level=ERROR")
		})
	}
}

func deleteRedisKeys(rc *redis.Client, pattern string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := rc.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		_ = rc.Del(ctx, iter.Val()).Err()
	}
}

// TestCLIRefusesHostileIdentifiers: the commands that take a key, holder,
// event id or config name refuse one that breaks the identifier rule as a
// usage error naming the argument, before they reach a server or database
// (none is running at these addresses).
func TestCLIRefusesHostileIdentifiers(t *testing.T) {
	t.Parallel()
	env := map[string]string{"SLUICE_SERVER": "http://127.0.0.1:1", "SLUICE_DB": "sqlite:" + filepath.Join(t.TempDir(), "none", "x.db")}
	at := "2030-01-01T00:00:00Z"
	for _, h := range hostileIDs() {
		if h.name == "900 KB" {
			continue
		}
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"lease", "acquire", "bulk", h.raw}, "invalid KEY: "},
			{[]string{"lease", "acquire", "bulk", "k", "--holder", h.raw}, "invalid --holder: "},
			{[]string{"lease", "list", "bulk", h.raw}, "invalid KEY: "},
			{[]string{"slots", "assign", h.raw, "--config", "c", "--at", at}, "invalid EVENT_ID: "},
			{[]string{"slots", "assign", "e", "--config", h.raw, "--at", at}, "invalid --config: "},
			{[]string{"slots", "load", "-", "--config", h.raw}, "invalid --config: "},
			{[]string{"slots", "config", h.raw, "--max", "1", "--window", "PT1S"}, "invalid slot config: name "},
		} {
			r := run(t, env, tc.args...)
			require.Equal(t, cli.ExitUsage, r.code, "%s %q: %s", h.name, tc.args, r.stderr)
			require.Contains(t, r.stderr, tc.want, "%s %q", h.name, tc.args)
		}
	}
}

// TestSlotsLoadRefusesInvalidUTF8: a JSON-lines file with bytes that are
// not UTF-8 is refused naming the line, not loaded with U+FFFD ids.
func TestSlotsLoadRefusesInvalidUTF8(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "events.jsonl")
	require.NoError(t, os.WriteFile(file, []byte("{\"eventId\":\"ok\",\"requestedTime\":\"2030-01-01T00:00:00Z\"}\n{\"eventId\":\"a\xffb\",\"requestedTime\":\"2030-01-01T00:00:00Z\"}\n"), 0o600))
	r := run(t, map[string]string{"SLUICE_DB": "sqlite:" + filepath.Join(dir, "db.sqlite")}, "slots", "load", file, "--config", "c")
	require.NotEqual(t, cli.ExitOK, r.code)
	require.Contains(t, r.stderr, "events.jsonl:2: not valid UTF-8")
}

// TestServeMemoryMaxBytes: --memory-max-bytes bounds the in-memory store,
// as its metrics say; a bound that is not positive is a usage error.
func TestServeMemoryMaxBytes(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--addr", "127.0.0.1:0", "--memory-max-bytes", "1048576")
	code, m := get(t, "http://"+s.addr+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Regexp(t, regexp.MustCompile(`(?m)^sluice_memstore_max_bytes 1\.048576e\+06$`), m)
	require.Equal(t, 0, s.stop(t))

	r := run(t, nil, "serve", "--memory-max-bytes", "0")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, "invalid --memory-max-bytes 0: want a positive number of bytes")
}
