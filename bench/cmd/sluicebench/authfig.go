package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/sluicerl/sluice/bench"
)

// httpAuthID is the -only name of the auth overhead figure.
const httpAuthID = "http/take-auth"

// httpAuthFigure measures POST /v1/take at conns connections without and
// with bearer-token auth, in alternating runs (off, on, off, on, ...) so
// that the load of a shared machine falls on both alike, and reports each
// run, the medians and the ratios. The goal is an auth overhead of at most
// 5% in throughput.
func httpAuthFigure(ctx context.Context, w *bufio.Writer, stderr io.Writer, rounds, conns int, dur time.Duration) error {
	fmt.Fprintf(w, "\n== POST /v1/take over loopback HTTP, without and with auth ==\n")
	fmt.Fprintf(w, "%d alternating runs each of %s (+500ms warmup) at %d connections; auth: %d tokens with scope take,\n", rounds, dur, conns, bench.AuthTokens)
	fmt.Fprintf(w, "each request's token hashed (SHA-256) and compared with all of them in constant time;\n")
	fmt.Fprintf(w, "order off,on then on,off alternating; a GC before each run.\n")
	fmt.Fprintf(w, "The load generator shares the %d CPUs (GOMAXPROCS=%d) with the server; load average before: %s\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), loadavg())
	fmt.Fprintf(w, "cpu/req = process CPU (server and load generator) per answered request: less disturbed by other load.\n")
	fmt.Fprintf(w, "%-6s %5s %12s %10s %10s %10s %8s\n", "auth", "run", "requests/s", "p50", "p99", "cpu/req", "errors")
	var rps, p99, cpu [2][]float64
	for i := 0; i < rounds; i++ {
		// ABBA order (off, on, on, off, ...): neither mode always runs
		// second, after the other's garbage.
		for j := 0; j < 2; j++ {
			mode := j ^ (i & 1)
			runtime.GC()
			lim, err := bench.TakeLimiter()
			if err != nil {
				return err
			}
			var h http.Handler
			token := ""
			if mode == 1 {
				h, token, err = bench.TakeHandlerAuth(lim)
			} else {
				h, err = bench.TakeHandler(lim)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(stderr, "http auth=%t run %d/%d\n", mode == 1, i+1, rounds)
			res, err := bench.RunHTTP(ctx, h, bench.HTTPConfig{Conns: conns, Duration: dur, Token: token})
			if err != nil {
				return err
			}
			if res.Errors > 0 {
				return fmt.Errorf("http auth=%t: %d errors, first: %s", mode == 1, res.Errors, res.FirstErr)
			}
			rps[mode] = append(rps[mode], res.RPS())
			p99[mode] = append(p99[mode], float64(res.P99))
			cpu[mode] = append(cpu[mode], float64(res.CPUPerRequest()))
			fmt.Fprintf(w, "%-6s %5d %12s %10s %10s %10s %8d\n", map[int]string{0: "off", 1: "on"}[mode], i+1,
				group3(res.RPS()), dur3(res.P50), dur3(res.P99), dur3(res.CPUPerRequest()), res.Errors)
		}
	}
	off, on := median(rps[0]), median(rps[1])
	p99off, p99on := median(p99[0]), median(p99[1])
	fmt.Fprintf(w, "median: off %s req/s p99 %s; on %s req/s p99 %s\n", group3(off), dur3(time.Duration(p99off)), group3(on), dur3(time.Duration(p99on)))
	over := 1 - on/off
	verdict := "OK"
	if over > 0.05 {
		verdict = "MISS"
	}
	cpuOff, cpuOn := median(cpu[0]), median(cpu[1])
	fmt.Fprintf(w, "median cpu/req: off %s, on %s: auth costs %.1f%% more CPU per request\n",
		dur3(time.Duration(cpuOff)), dur3(time.Duration(cpuOn)), 100*(cpuOn/cpuOff-1))
	fmt.Fprintf(w, "auth throughput overhead: %.1f%% (goal <= 5%%: %s); p99 on/off: %.2fx; load average after: %s\n",
		100*over, verdict, p99on/p99off, loadavg())
	return nil
}

// loadavg is /proc/loadavg's first three fields, or "n/a".
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "n/a"
	}
	return strings.Join(f[:3], " ")
}
