package main

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/rls"
)

// TestSmoke runs the load and the over-admission check briefly against an
// in-process Sluice service on memory (the full comparison builds and
// starts two servers: go run ./cmd/rlsbench).
func TestSmoke(t *testing.T) {
	rules, err := rls.Parse(rls.File{Name: "rlsbench.yaml", Data: []byte(configYAMLWith(50))})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limiter.New(limiter.Config{Policies: rules.Policies()})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := rls.New(rls.Config{Rules: rules, Limiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rls.NewServer(svc, rls.ServerConfig{})
	go func() { _ = srv.Serve(ln) }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tg := &target{name: "sluice", addr: ln.Addr().String(), stop: func() { _ = srv.Shutdown(ctx) }}
	if err := tg.connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer tg.stop()
	res, err := load(ctx, tg, 4, 10, 20*time.Millisecond, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if res.calls == 0 || res.errors != 0 || res.over != 0 || res.p99 < res.p50 {
		t.Fatalf("load: %+v", res)
	}
	e, err := edge(ctx, tg, "smoke")
	if err != nil {
		t.Fatal(err)
	}
	if e.before+e.after == 0 || e.sent < e.before+e.after {
		t.Fatalf("edge: nothing admitted: %+v", e)
	}
}

// TestParseRedisCPU reads Redis's CPU time from an INFO cpu reply, and
// nothing from one that lacks a field or holds a malformed one.
func TestParseRedisCPU(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:2.500000\r\nused_cpu_sys_children:9.000000\r\nused_cpu_user_children:9.000000\r\n"
	if got, want := parseRedisCPU(info), 3750*time.Millisecond; got != want {
		t.Fatalf("parseRedisCPU = %v, want %v", got, want)
	}
	for _, bad := range []string{
		"",
		"# CPU\r\nused_cpu_sys:1.25\r\n",
		"# CPU\r\nused_cpu_sys:1.25\r\nused_cpu_user:x\r\n",
		"# CPU\r\nused_cpu_sys:-1\r\nused_cpu_user:2\r\n",
	} {
		if got := parseRedisCPU(bad); got != 0 {
			t.Errorf("parseRedisCPU(%q) = %v, want 0", bad, got)
		}
	}
}
