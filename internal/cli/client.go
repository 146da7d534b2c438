package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicerl/sluice/store"
)

// The client commands talk to a running 'sluice serve' over its HTTP API:
// take, acquire and report (the adaptive calls of /v1/outbound), leases, and
// 'slots assign --server'. They share --server, --token, --timeout and
// --output.

// clientFlags are the flags every client command shares.
type clientFlags struct {
	server  string
	token   string
	timeout time.Duration
	output  string
}

// bind adds the flags to cmd; the returned func checks them (and reads
// SLUICE_SERVER and SLUICE_TOKEN), for PreRunE.
func (f *clientFlags) bind(cmd *cobra.Command, opts *Options, server bool) func(*cobra.Command, []string) error {
	fs := cmd.Flags()
	if server {
		fs.StringVar(&f.server, "server", DefaultServer, "server base `URL` (env SLUICE_SERVER)")
	}
	fs.StringVar(&f.token, "token", "", "bearer `token` sent as Authorization (env SLUICE_TOKEN)")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "longest one request may take")
	fs.StringVar(&f.output, "output", "json", "output `format`: json or table")
	return func(cmd *cobra.Command, _ []string) error {
		source, err := applyEnv(cmd.Flags(), opts.Getenv, []envFlag{{"server", "SLUICE_SERVER"}, {"token", "SLUICE_TOKEN"}})
		if err != nil {
			return err
		}
		return f.check(source)
	}
}

func (f *clientFlags) check(source map[string]string) error {
	u, err := url.Parse(f.server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("invalid %s %q: want http://HOST:PORT or https://...", cmpOr(source["server"], "--server"), f.server)
	}
	f.server = strings.TrimSuffix(f.server, "/")
	if f.timeout <= 0 {
		return usagef("invalid --timeout %s: want a positive duration", f.timeout)
	}
	if f.output != "json" && f.output != "table" {
		return usagef("invalid --output %q: want json or table", f.output)
	}
	if strings.ContainsAny(f.token, "\r\n") {
		return usagef("invalid %s: a token is one line", cmpOr(source["token"], "--token"))
	}
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// call makes one request with a JSON body (none when body is nil) and
// returns its status, headers and body.
func (f *clientFlags) call(ctx context.Context, method, path string, body any) (int, http.Header, []byte, error) {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return 0, nil, nil, err
		}
	}
	return request(ctx, f.server, f.token, f.timeout, method, path, b)
}

// request makes one request to server (a base URL) within timeout, with
// the token as a bearer Authorization when set and body as JSON when not
// nil, and returns the answer's status, headers and body (at most 8 MiB).
// Every client command calls the server through it.
func request(ctx context.Context, server, token string, timeout time.Duration, method, path string, body []byte) (int, http.Header, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, server+path, r)
	if err != nil {
		return 0, nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s %s: %w", method, server, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("reading the answer: %w", err)
	}
	return resp.StatusCode, resp.Header, out, nil
}

// print writes a JSON body as it came (json) or as a table.
func (f *clientFlags) print(opts *Options, body []byte) error {
	if f.output == "json" {
		_, err := opts.Stdout.Write(body)
		return err
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("the server's answer is not JSON: %w", err)
	}
	tw := tabwriter.NewWriter(opts.Stdout, 0, 4, 2, ' ', 0)
	writeTable(tw, v)
	return tw.Flush()
}

// writeTable writes an object as NAME VALUE lines, and a list of objects
// (an object's only array of objects: leases, items, results) as columns.
func writeTable(w io.Writer, v any) {
	obj, ok := v.(map[string]any)
	if !ok {
		fmt.Fprintln(w, cell(v))
		return
	}
	for _, name := range sortedKeys(obj) {
		if rows, ok := obj[name].([]any); ok && len(rows) > 0 {
			if _, ok := rows[0].(map[string]any); ok {
				var cols []string
				for _, r := range rows {
					if m, ok := r.(map[string]any); ok {
						for k := range m {
							if !slices.Contains(cols, k) {
								cols = append(cols, k)
							}
						}
					}
				}
				slices.Sort(cols)
				fmt.Fprintln(w, strings.ToUpper(strings.Join(cols, "\t")))
				for _, r := range rows {
					m, _ := r.(map[string]any)
					cells := make([]string, len(cols))
					for i, c := range cols {
						cells[i] = cell(m[c])
					}
					fmt.Fprintln(w, strings.Join(cells, "\t"))
				}
				continue
			}
		}
		fmt.Fprintf(w, "%s\t%s\n", name, cell(obj[name]))
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// problemError turns a problem body into an error naming the status, the
// problem's title and detail, and when to retry.
func problemError(what string, code int, h http.Header, body []byte) error {
	var p struct {
		Title  string `json:"title"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(body, &p) != nil || p.Title == "" {
		return fmt.Errorf("%s: server answered %d: %s", what, code, strings.TrimSpace(string(body)))
	}
	msg := fmt.Sprintf("%s: %s (%d)", what, strings.ToLower(p.Title), code)
	if p.Detail != "" {
		msg += ": " + p.Detail
	}
	if d, ok := serverRetryAfter(h, body); ok && d > 0 {
		msg += fmt.Sprintf("; retry after %s", d)
	}
	return errors.New(msg)
}

func newTakeCmd(opts *Options) *cobra.Command {
	var f clientFlags
	var cost int64
	cmd := &cobra.Command{
		Use:   "take POLICY KEY",
		Short: "Take units of a policy on a running server (POST /v1/take)",
		Long: `Take --cost units (default 1; 0 peeks) of POLICY for KEY on a running
'sluice serve' and print the decision. Exits 1 when denied, saying when to
retry.`,
		Args: usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkID("KEY", args[1], store.MaxIDBytes); err != nil {
				return err
			}
			if cost < 0 {
				return usagef("invalid --cost %d: want a whole number >= 0", cost)
			}
			code, h, out, err := f.call(cmd.Context(), http.MethodPost, "/v1/take", map[string]any{"policy": args[0], "key": args[1], "cost": cost})
			if err != nil {
				return err
			}
			switch code {
			case http.StatusOK:
				return f.print(opts, out)
			case http.StatusTooManyRequests:
				if err := f.print(opts, out); err != nil {
					return err
				}
				d, _ := serverRetryAfter(h, out)
				return fmt.Errorf("take: denied; retry after %s", d)
			}
			return problemError("take", code, h, out)
		},
	}
	cmd.PreRunE = f.bind(cmd, opts, true)
	cmd.Flags().Int64Var(&cost, "cost", 1, "units to take (0 peeks)")
	return cmd
}

func newAcquireCmd(opts *Options) *cobra.Command {
	var f clientFlags
	var (
		wait       time.Duration
		profile    string
		idempotent bool
	)
	cmd := &cobra.Command{
		Use:   "acquire KEY",
		Short: "Get a permit for one call to an upstream (POST /v1/outbound/acquire)",
		Long: `Ask a running 'sluice serve' for a permit to call the upstream KEY once,
waiting at most --wait for the key's turn. Prints the permit, which 'sluice
report' takes after the call. Exits 1 when the key is paced or paused past
--wait, or its circuit breaker is open, saying when to ask again.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkID("KEY", args[0], store.MaxIDBytes); err != nil {
				return err
			}
			if wait < 0 || wait > 20*time.Second {
				return usagef("invalid --wait %s: want from 0 to 20s", wait)
			}
			body := map[string]any{"key": args[0], "waitMs": wait.Milliseconds(), "idempotent": idempotent}
			if profile != "" {
				body["profile"] = profile
			}
			code, h, out, err := f.call(cmd.Context(), http.MethodPost, "/v1/outbound/acquire", body)
			if err != nil {
				return err
			}
			if code != http.StatusOK {
				return problemError("acquire", code, h, out)
			}
			return f.print(opts, out)
		},
	}
	cmd.PreRunE = f.bind(cmd, opts, true)
	cmd.Flags().DurationVar(&wait, "wait", 0, "longest the server waits for the key's turn (at most 20s)")
	cmd.Flags().StringVar(&profile, "profile", "", "provider `profile` the key belongs to")
	cmd.Flags().BoolVar(&idempotent, "idempotent", false, "the call may be retried when its outcome is unknown")
	return cmd
}

func newReportCmd(opts *Options) *cobra.Command {
	var f clientFlags
	var (
		status   int
		headers  []string
		latency  time.Duration
		errKind  string
		attempt  int
		bodyFile string
	)
	cmd := &cobra.Command{
		Use:   "report PERMIT --status CODE [--header 'Retry-After: 2']...",
		Short: "Report what the upstream answered to a permit's call (POST /v1/outbound/report)",
		Long: `Report the upstream's answer to the call PERMIT (from 'sluice acquire') was
for: its status (or --error when there was none), the headers the server
reads (Retry-After, RateLimit*, X-RateLimit-*, X-MBX-*, X-Shopify-*), the
latency, and optionally a JSON body (GraphQL throttleStatus). Prints how the
server read it and whether to retry.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]any{"permit": args[0]}
			switch {
			case status != 0 && errKind != "":
				return usagef("--status and --error exclude each other: a response has no transport error")
			case status != 0:
				body["status"] = status
			case errKind != "":
				body["error"] = errKind
			default:
				return usagef("--status or --error is required")
			}
			if len(headers) > 0 {
				hm := map[string][]string{}
				for _, h := range headers {
					name, value, ok := strings.Cut(h, ":")
					if !ok || strings.TrimSpace(name) == "" {
						return usagef("invalid --header %q: want 'Name: value'", h)
					}
					name = http.CanonicalHeaderKey(strings.TrimSpace(name))
					hm[name] = append(hm[name], strings.TrimSpace(value))
				}
				body["headers"] = hm
			}
			if latency < 0 {
				return usagef("invalid --latency %s: want a duration >= 0", latency)
			}
			if latency > 0 {
				body["latencyMs"] = float64(latency) / float64(time.Millisecond)
			}
			if attempt > 0 {
				body["attempt"] = attempt
			}
			if bodyFile != "" {
				b, err := os.ReadFile(bodyFile)
				if err != nil {
					return usagef("invalid --body-file: %v", err)
				}
				body["body"] = string(b)
			}
			code, h, out, err := f.call(cmd.Context(), http.MethodPost, "/v1/outbound/report", body)
			if err != nil {
				return err
			}
			if code != http.StatusOK {
				return problemError("report", code, h, out)
			}
			return f.print(opts, out)
		},
	}
	cmd.PreRunE = f.bind(cmd, opts, true)
	fs := cmd.Flags()
	fs.IntVar(&status, "status", 0, "the upstream's HTTP status")
	fs.StringArrayVar(&headers, "header", nil, "a response header, 'Name: value' (repeat for more)")
	fs.DurationVar(&latency, "latency", 0, "how long the call took (default: since the permit was granted)")
	fs.StringVar(&errKind, "error", "", "no response: timeout, connect, network, canceled or other")
	fs.IntVar(&attempt, "attempt", 0, "which attempt this was, from 1 (for the retry back-off)")
	fs.StringVar(&bodyFile, "body-file", "", "a `file` with the JSON body (at most 64 KiB are read)")
	return cmd
}

func newLeasesCmd(opts *Options) *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "leases POLICY KEY",
		Short: "List a key's live leases on a running server (GET /v1/leases)",
		Long: `List the live leases of POLICY for KEY on a running 'sluice serve', with
holder fingerprints, never ids. ('sluice lease' acquires, renews and
releases them.)`,
		Args: usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkID("KEY", args[1], store.MaxIDBytes); err != nil {
				return err
			}
			q := url.Values{"policy": {args[0]}, "key": {args[1]}}
			code, h, out, err := f.call(cmd.Context(), http.MethodGet, "/v1/leases?"+q.Encode(), nil)
			if err != nil {
				return err
			}
			if code != http.StatusOK {
				return problemError("leases", code, h, out)
			}
			return f.print(opts, out)
		},
	}
	cmd.PreRunE = f.bind(cmd, opts, true)
	return cmd
}
