// Command keyrss measures what hostile keys cost a running sluice serve:
// it sends N takes, each with a unique key of a given size, to POST
// /v1/take and prints the answers by status and the server's resident
// memory (VmRSS, and its peak VmHWM, from /proc/PID/status) before and
// after. It is the measurement behind the README's identifier figure:
//
//	sluice serve --addr 127.0.0.1:18080 --memory-max-bytes 16777216 &
//	go run ./cmd/keyrss -addr 127.0.0.1:18080 -pid $! -n 100000 -key-bytes 65536
//	go run ./cmd/keyrss -addr 127.0.0.1:18080 -pid $! -n 100000 -key-bytes 500
//
// Linux only (it reads /proc).
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "sluice serve address")
	pid := flag.Int("pid", 0, "sluice serve's process id (for /proc/PID/status)")
	n := flag.Int("n", 100000, "takes to send")
	keyBytes := flag.Int("key-bytes", 65536, "bytes per key")
	conc := flag.Int("c", 8, "concurrent clients")
	policy := flag.String("policy", "default", "policy to take from")
	flag.Parse()
	if *pid <= 0 || *keyBytes < 8 {
		fmt.Fprintln(os.Stderr, "keyrss: -pid is required and -key-bytes must be at least 8")
		os.Exit(2)
	}
	rss0, hwm0 := memory(*pid)
	fmt.Printf("before: VmRSS %s, VmHWM %s\n", mib(rss0), mib(hwm0))

	var next atomic.Int64
	var mu sync.Mutex
	codes := map[int]int{}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *conc}, Timeout: time.Minute}
	start := time.Now()
	var wg sync.WaitGroup
	for range *conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pad := strings.Repeat("k", *keyBytes-8)
			var body bytes.Buffer
			for {
				i := next.Add(1)
				if i > int64(*n) {
					return
				}
				body.Reset()
				fmt.Fprintf(&body, `{"policy":%q,"key":"%08x%s"}`, *policy, i, pad)
				resp, err := client.Post("http://"+*addr+"/v1/take", "application/json", &body)
				code := -1
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					code = resp.StatusCode
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	rss1, hwm1 := memory(*pid)
	ks := make([]int, 0, len(codes))
	for k := range codes {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	fmt.Printf("%d takes with %d-byte keys in %s:", *n, *keyBytes, elapsed.Round(time.Millisecond))
	for _, k := range ks {
		fmt.Printf(" %d x%d", k, codes[k])
	}
	fmt.Printf("\nafter: VmRSS %s, VmHWM %s\n", mib(rss1), mib(hwm1))
	if m, err := metric("http://"+*addr+"/metrics", "sluice_memstore_"); err == nil {
		fmt.Print(m)
	}
}

// memory returns VmRSS and VmHWM of pid in bytes.
func memory(pid int) (rss, hwm int64) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		fmt.Fprintln(os.Stderr, "keyrss:", err)
		os.Exit(1)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && (fs[0] == "VmRSS:" || fs[0] == "VmHWM:") {
			v, _ := strconv.ParseInt(fs[1], 10, 64)
			if fs[0] == "VmRSS:" {
				rss = v << 10
			} else {
				hwm = v << 10
			}
		}
	}
	return rss, hwm
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// metric returns the lines of a Prometheus text page that start with prefix.
func metric(url, prefix string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			out.WriteString(sc.Text() + "\n")
		}
	}
	return out.String(), sc.Err()
}
