package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicerl/sluice/sim"
)

// procsLead is how long a run's simulators serve before its clients start;
// the simulators' limit changes are shifted by it, so that a change falls
// at the same second of the clients' run as in the scenario.
const procsLead = 2 * time.Second

// runProcs runs issue 18's setup as the issue ran it, with real OS
// processes of the sluice binary bin: for every scenario, one simulator
// per client (sluice sim --serve), two sluice sim --target processes of
// half the workers each sharing the state store by one --state-prefix,
// and beside them, against the other simulator, two processes of a fixed
// pace at half of factor times the starting limit each. The processes'
// seconds are summed before the figures. parallel scenarios go at once.
func runProcs(ctx context.Context, bin, state string, factor float64, scenarios []sim.Scenario, parallel int, stderr io.Writer) ([]sim.Row, error) {
	rows := make([]sim.Row, 2*len(scenarios))
	errs := make([]error, len(scenarios))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, sc := range scenarios {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if ctx.Err() != nil {
				errs[i] = ctx.Err()
				return
			}
			r, err := procsScenario(ctx, bin, state, factor, sc)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", sc.Name, err)
				return
			}
			fmt.Fprintf(stderr, "  %s done (load average %s)\n", sc.Name, loadavg())
			copy(rows[2*i:], r)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return rows, nil
}

// procsScenario runs one scenario (see runProcs) and returns its two rows,
// sluice first.
func procsScenario(ctx context.Context, bin, state string, factor float64, sc sim.Scenario) ([]sim.Row, error) {
	if err := sc.Fill(); err != nil {
		return nil, err
	}
	if sc.Processes < 1 || sc.Workers < sc.Processes {
		return nil, fmt.Errorf("want at least one worker per process, got %d workers in %d processes", sc.Workers, sc.Processes)
	}
	dir, err := os.MkdirTemp("", "simtable-procs-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	scenario := filepath.Join(dir, "scenario.yaml")
	if err := os.WriteFile(scenario, []byte(serveYAML(sc)), 0o644); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "simtable-procs:" + hex.EncodeToString(b[:]) + ":"

	type proc struct {
		name string
		cmd  *exec.Cmd
		out  bytes.Buffer
	}
	var procs []*proc
	start := func(name string, args ...string) error {
		p := &proc{name: name, cmd: exec.CommandContext(ctx, bin, args...)}
		p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
		p.cmd.WaitDelay = 5 * time.Second
		if err := p.cmd.Start(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		procs = append(procs, p)
		return nil
	}
	wait := func() error {
		var errs []error
		for _, p := range procs {
			if err := p.cmd.Wait(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w\n%s", p.name, err, tail(p.out.String(), 2000)))
			}
		}
		return errors.Join(errs...)
	}
	addrs := make([]string, 2)
	for i := range addrs {
		if addrs[i], err = freeAddr(); err != nil {
			return nil, err
		}
	}
	served := time.Now()
	for i, c := range []string{"sluice", "fixed"} {
		if err := start("simulator for "+c, "sim", "--serve", addrs[i], "--scenario", scenario,
			"--duration", (sc.Duration + procsLead + 2*time.Second).String()); err != nil {
			cancel()
			return nil, errors.Join(err, wait())
		}
	}
	for _, a := range addrs {
		if err := waitListening(ctx, a, 30*time.Second); err != nil {
			cancel()
			return nil, errors.Join(err, wait())
		}
	}
	if d := procsLead - time.Since(served); d > 0 {
		time.Sleep(d)
	}
	common := []string{"--processes", "1", "--workers", "", "--limit", strconv.FormatFloat(sc.Provider.Limit, 'g', -1, 64), "--duration", sc.Duration.String()}
	for _, ch := range sc.Provider.Changes {
		common = append(common, "--change", ch.At.String()+"="+strconv.FormatFloat(ch.Limit, 'g', -1, 64))
	}
	if sc.SlowAfter > 0 {
		common = append(common, "--slow-after", sc.SlowAfter.String())
	}
	var outs [2][]string
	for i := range sc.Processes {
		w := sc.Workers / sc.Processes
		if i < sc.Workers%sc.Processes {
			w++
		}
		args := append([]string(nil), common...)
		args[3] = strconv.Itoa(w)
		so := filepath.Join(dir, fmt.Sprintf("sluice-%d.svg", i))
		fo := filepath.Join(dir, fmt.Sprintf("fixed-%d.svg", i))
		outs[0] = append(outs[0], strings.TrimSuffix(so, ".svg")+".json")
		outs[1] = append(outs[1], strings.TrimSuffix(fo, ".svg")+".json")
		if err := start(fmt.Sprintf("sluice process %d", i+1), append([]string{"sim", "--target", "http://" + addrs[0] + "/",
			"--state", state, "--state-prefix", prefix, "--out", so}, args...)...); err != nil {
			cancel()
			return nil, errors.Join(err, wait())
		}
		if err := start(fmt.Sprintf("fixed process %d", i+1), append([]string{"sim", "--target", "http://" + addrs[1] + "/",
			"--client", "fixed", "--fixed-factor", strconv.FormatFloat(factor/float64(sc.Processes), 'g', -1, 64), "--out", fo}, args...)...); err != nil {
			cancel()
			return nil, errors.Join(err, wait())
		}
	}
	if err := wait(); err != nil {
		return nil, err
	}
	var rows []sim.Row
	for i, name := range []string{"sluice", fmt.Sprintf("fixed-%gx", factor)} {
		res, err := sumSeconds(outs[i])
		if err != nil {
			return nil, err
		}
		rows = append(rows, sim.Row{Scenario: sc.Name, Contender: name, Summary: sim.Summarize(res), Result: res})
	}
	return rows, nil
}

// serveYAML is sc's provider as a scenario file for sluice sim --serve,
// its limit changes procsLead later.
func serveYAML(sc sim.Scenario) string {
	p := sc.Provider
	var b strings.Builder
	fmt.Fprintf(&b, "name: %q\nprovider:\n  dialect: %s\n  limit: %g\n  latency: %s\n", sc.Name, p.Dialect, p.Limit, p.Latency)
	if p.Burst > 0 {
		fmt.Fprintf(&b, "  burst: %s\n", p.Burst)
	}
	if p.Jitter > 0 {
		fmt.Fprintf(&b, "  jitter: %s\n", p.Jitter)
	}
	if p.FixedWindow {
		b.WriteString("  fixed_window: true\n")
	}
	if p.RetryAfterMillis {
		b.WriteString("  retry_after_millis: true\n")
	}
	if p.BanOnRefusals {
		b.WriteString("  ban_on_refusals: true\n")
	}
	if len(p.Changes) > 0 {
		b.WriteString("  changes:\n")
		for _, c := range p.Changes {
			fmt.Fprintf(&b, "    - at: %s\n      limit: %g\n", c.At+procsLead, c.Limit)
		}
	}
	return b.String()
}

// sumSeconds reads the --out JSON files of one client's processes and sums
// their seconds, second by second (the limit is the first file's).
func sumSeconds(files []string) (*sim.Result, error) {
	var sum sim.Result
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var r sim.Result
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if len(r.Seconds) == 0 {
			return nil, fmt.Errorf("%s holds no seconds", f)
		}
		for len(sum.Seconds) < len(r.Seconds) {
			sum.Seconds = append(sum.Seconds, sim.Second{T: len(sum.Seconds), Limit: r.Seconds[len(sum.Seconds)].Limit})
		}
		for i, s := range r.Seconds {
			t := &sum.Seconds[i]
			t.Offered += s.Offered
			t.Admitted += s.Admitted
			t.Goodput += s.Goodput
			t.Throttles += s.Throttles
			t.Bans += s.Bans
			t.Retries += s.Retries
			t.Errors += s.Errors
			t.Rate += s.Rate
		}
	}
	return &sum, nil
}

// freeAddr returns a loopback address with a port free at the time.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitListening waits until addr accepts a connection, at most d.
func waitListening(ctx context.Context, addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("simulator on %s did not listen within %v: %w", addr, d, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
