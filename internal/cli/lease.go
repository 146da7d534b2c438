package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicerl/sluice/store"
)

// DefaultServer is the server the lease commands talk to without --server
// or SLUICE_SERVER.
const DefaultServer = "http://" + DefaultAddr

type leaseFlags struct {
	server  string
	token   string
	timeout time.Duration
	holder  string
	wait    time.Duration
}

func newLeaseCmd(opts *Options) *cobra.Command {
	var f leaseFlags
	cmd := &cobra.Command{
		Use:   "lease",
		Short: "Acquire, renew, release and list leases on a running server",
		Long: `Work with the leases of a running 'sluice serve' through its HTTP API.
A lease is one of a concurrency policy's permits for a key; acquire prints
it as JSON, with the id that renew and release take and the fencing token
to guard writes with.`,
		Args: usageArgs(noSubcommand),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.server, "server", DefaultServer, "server base `URL` (env SLUICE_SERVER)")
	pf.DurationVar(&f.timeout, "timeout", 10*time.Second, "longest one request may take")
	pf.StringVar(&f.token, "token", "", "bearer `token` sent as Authorization (env SLUICE_TOKEN)")
	pre := func(cmd *cobra.Command, _ []string) error {
		source, err := applyEnv(cmd.Flags(), opts.Getenv, []envFlag{{"server", "SLUICE_SERVER"}, {"token", "SLUICE_TOKEN"}})
		if err != nil {
			return err
		}
		u, err := url.Parse(f.server)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return usagef("invalid %s %q: want http://HOST:PORT or https://...", source["server"], f.server)
		}
		if f.timeout <= 0 {
			return usagef("invalid --timeout %s: want a positive duration", f.timeout)
		}
		if f.wait < 0 {
			return usagef("invalid --wait %s: want a duration >= 0", f.wait)
		}
		f.server = strings.TrimSuffix(f.server, "/")
		return nil
	}

	acquire := &cobra.Command{
		Use:   "acquire POLICY KEY",
		Short: "Acquire a lease (POST /v1/leases)",
		Long: `Acquire one permit of concurrency policy POLICY for KEY and print the lease.
If every permit is held, exit 1 with when one frees, or with --wait keep
trying for up to that long: again after a back-off from 100ms to 2s (a
holder may release early), and never later than the server's Retry-After.`,
		Args:    usageArgs(cobra.ExactArgs(2)),
		PreRunE: pre,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkID("KEY", args[1], store.MaxIDBytes); err != nil {
				return err
			}
			if f.holder != "" {
				if err := checkID("--holder", f.holder, store.MaxHolderLen); err != nil {
					return err
				}
			}
			body, _ := json.Marshal(map[string]string{"policy": args[0], "key": args[1], "holder": f.holder})
			deadline := time.Now().Add(f.wait)
			backoff := 100 * time.Millisecond
			for {
				code, hdr, out, err := f.call(cmd.Context(), http.MethodPost, "/v1/leases", body)
				if err != nil {
					return err
				}
				if left := time.Until(deadline); code == http.StatusConflict && left > 0 {
					if err := sleepCtx(cmd.Context(), min(backoff, retryAfter(hdr, out), left)); err != nil {
						return err
					}
					backoff = min(2*backoff, 2*time.Second)
					continue
				}
				err = answer(opts, code, http.StatusCreated, out)
				if d, ok := serverRetryAfter(hdr, out); ok && code == http.StatusConflict {
					err = fmt.Errorf("%w; a permit frees within %s (Retry-After)", err, d)
				}
				return err
			}
		},
	}
	acquire.Flags().StringVar(&f.holder, "holder", "", "holder `id`; whoever knows it can renew or release the lease (default: a random one the server makes up)")
	acquire.Flags().DurationVar(&f.wait, "wait", 0, "keep trying for up to this long while every permit is held")

	renew := &cobra.Command{
		Use:     "renew ID",
		Short:   "Renew a lease by its id (POST /v1/leases/ID/renew)",
		Args:    usageArgs(cobra.ExactArgs(1)),
		PreRunE: pre,
		RunE: func(cmd *cobra.Command, args []string) error {
			code, _, out, err := f.call(cmd.Context(), http.MethodPost, "/v1/leases/"+url.PathEscape(args[0])+"/renew", nil)
			if err != nil {
				return err
			}
			return answer(opts, code, http.StatusOK, out)
		},
	}
	release := &cobra.Command{
		Use:     "release ID",
		Short:   "Release a lease by its id (DELETE /v1/leases/ID)",
		Args:    usageArgs(cobra.ExactArgs(1)),
		PreRunE: pre,
		RunE: func(cmd *cobra.Command, args []string) error {
			code, _, out, err := f.call(cmd.Context(), http.MethodDelete, "/v1/leases/"+url.PathEscape(args[0]), nil)
			if err != nil {
				return err
			}
			if code == http.StatusNoContent {
				fmt.Fprintln(opts.Stdout, "released")
				return nil
			}
			return answer(opts, code, http.StatusNoContent, out)
		},
	}
	list := &cobra.Command{
		Use:     "list POLICY KEY",
		Short:   "List the live leases of a key, with holder fingerprints (GET /v1/leases?policy=POLICY&key=KEY)",
		Args:    usageArgs(cobra.ExactArgs(2)),
		PreRunE: pre,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkID("KEY", args[1], store.MaxIDBytes); err != nil {
				return err
			}
			q := url.Values{"policy": {args[0]}, "key": {args[1]}}
			code, _, out, err := f.call(cmd.Context(), http.MethodGet, "/v1/leases?"+q.Encode(), nil)
			if err != nil {
				return err
			}
			return answer(opts, code, http.StatusOK, out)
		},
	}
	cmd.AddCommand(acquire, renew, release, list)
	return cmd
}

// call makes one request (request, in client.go) and returns its status,
// headers and body.
func (f *leaseFlags) call(ctx context.Context, method, path string, body []byte) (int, http.Header, []byte, error) {
	return request(ctx, f.server, f.token, f.timeout, method, path, body)
}

// answer prints a successful body, or turns a problem into an error.
func answer(opts *Options, code, want int, body []byte) error {
	if code == want {
		_, err := opts.Stdout.Write(body)
		return err
	}
	var p struct {
		Title  string `json:"title"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(body, &p) != nil || p.Title == "" {
		return fmt.Errorf("lease: server answered %d: %s", code, strings.TrimSpace(string(body)))
	}
	msg := fmt.Sprintf("lease: %s (%d)", strings.ToLower(p.Title), code)
	if p.Detail != "" {
		msg += ": " + p.Detail
	}
	return fmt.Errorf("%s", msg)
}

// retryAfter reads a 409's retryAfterMs (or Retry-After), at least 10ms.
func retryAfter(h http.Header, body []byte) time.Duration {
	var p struct {
		RetryAfterMs int64 `json:"retryAfterMs"`
	}
	d := time.Second
	if json.Unmarshal(body, &p) == nil && p.RetryAfterMs > 0 {
		d = time.Duration(p.RetryAfterMs) * time.Millisecond
	} else if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil {
		d = time.Duration(s) * time.Second
	}
	return max(d, 10*time.Millisecond)
}

// serverRetryAfter is when the server says to try again: the body's
// retryAfterMs, else the Retry-After header's seconds; false when it says
// neither.
func serverRetryAfter(h http.Header, body []byte) (time.Duration, bool) {
	var p struct {
		RetryAfterMs *int64 `json:"retryAfterMs"`
	}
	if json.Unmarshal(body, &p) == nil && p.RetryAfterMs != nil && *p.RetryAfterMs >= 0 {
		return time.Duration(*p.RetryAfterMs) * time.Millisecond, true
	}
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	return 0, false
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
