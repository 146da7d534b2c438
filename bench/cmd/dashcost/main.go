// Command dashcost measures what the dashboard costs the take path: POST
// /v1/take throughput over loopback HTTP (bench.RunHTTP) against the API
// alone, and against the API as `sluice serve` mounts it with the
// dashboard, whose Recorder sees every decision, while an open overview
// page refreshes (its live part rendered every -refresh). Runs alternate,
// A B, B A, A B ..., so that a machine's changing load falls on both and
// neither side always runs second; it prints
// each run and the medians: of takes per second, and of the process's CPU
// time per take (server, load generator and the page's refreshes), which a
// busy machine disturbs far less than throughput.
//
//	go run ./cmd/dashcost -rounds 3 -duration 5s
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sluicerl/sluice/bench"
)

func main() {
	rounds := flag.Int("rounds", 3, "runs of each side")
	dur := flag.Duration("duration", 5*time.Second, "measured span of one run (after a 500ms warm-up)")
	conns := flag.Int("conns", 64, "client goroutines and connections")
	every := flag.Duration("refresh", time.Second, "how often the open overview page refreshes (the page's default is 5s)")
	flag.Parse()
	if err := run(*rounds, *dur, *conns, *every); err != nil {
		fmt.Fprintln(os.Stderr, "dashcost:", err)
		os.Exit(1)
	}
}

func run(rounds int, dur time.Duration, conns int, every time.Duration) error {
	ctx := context.Background()
	var without, with, cpuWithout, cpuWith []float64
	var renders, bad atomic.Int64
	for r := range rounds {
		order := []bool{false, true}
		if r%2 == 1 { // B A in every other round: neither side always runs second
			order = []bool{true, false}
		}
		for _, dash := range order {
			lim, err := bench.TakeLimiter()
			if err != nil {
				return err
			}
			var h http.Handler
			stop := make(chan struct{})
			done := make(chan struct{})
			if dash {
				var refresh func() int
				if h, refresh, err = bench.TakeHandlerWithDashboard(lim); err != nil {
					return err
				}
				go func() {
					defer close(done)
					t := time.NewTicker(every)
					defer t.Stop()
					for {
						select {
						case <-stop:
							return
						case <-t.C:
							if refresh() != http.StatusOK {
								bad.Add(1)
							}
							renders.Add(1)
						}
					}
				}()
			} else {
				close(done)
				if h, err = bench.TakeHandler(lim); err != nil {
					return err
				}
			}
			res, err := bench.RunHTTP(ctx, h, bench.HTTPConfig{Conns: conns, Duration: dur})
			close(stop)
			<-done
			if err != nil {
				return err
			}
			name := "api alone     "
			if dash {
				name = "api+dashboard "
				with = append(with, res.RPS())
				cpuWith = append(cpuWith, float64(res.CPUPerRequest()))
			} else {
				without = append(without, res.RPS())
				cpuWithout = append(cpuWithout, float64(res.CPUPerRequest()))
			}
			fmt.Printf("round %d %s %10.0f takes/s  %6.1f µs CPU/take  p50 %s  p99 %s  errors %d\n", r+1, name, res.RPS(),
				float64(res.CPUPerRequest())/1e3, res.P50, res.P99, res.Errors)
		}
	}
	a, b := median(without), median(with)
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("median: api alone %.0f takes/s, with the dashboard open %.0f takes/s: %.1f%% cost (%d overview renders, %d failed)\n",
		a, b, 100*(a-b)/a, renders.Load(), bad.Load())
	ca, cb := median(cpuWithout), median(cpuWith)
	fmt.Printf("median CPU per take: api alone %.1f µs, with the dashboard open %.1f µs: %.1f%% cost\n", ca/1e3, cb/1e3, 100*(cb-ca)/ca)
	fmt.Printf("%d CPUs, GOMAXPROCS %d, load average %s", runtime.NumCPU(), runtime.GOMAXPROCS(0), load)
	return nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
