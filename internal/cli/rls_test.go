package cli_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicerl/sluice/internal/cli"
)

const rlsConfig = "../../rls/testdata/envoy/readme_03_edge_proxy_per_ip.yaml"

func TestServeRLS(t *testing.T) {
	t.Parallel()
	// Per hour, so that nothing refills during the test however slow.
	cfg := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("domain: edge_proxy_per_ip\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 10}\n"), 0o600))
	s := startServe(t, nil, "--addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0",
		"--rls-config", cfg+","+"../../rls/testdata/envoy/readme_01_mongo_cps.yaml", "--rls-headers", "ietf")
	m := regexp.MustCompile(`sluice rate limit service listening on grpc://(\S+)`).FindStringSubmatch(s.stdout.String())
	require.NotNil(t, m, s.stdout.String())
	conn, err := grpc.NewClient(m[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Four takes over HTTP on the rule's policy and the descriptor's key...
	for range 4 {
		resp, err := http.Post("http://"+s.addr+"/v1/take", "application/json",
			strings.NewReader(`{"policy":"rls:edge_proxy_per_ip.remote_address","key":"remote_address=198.51.100.1"}`))
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	// ...spend the descriptor's budget over gRPC.
	client := pb.NewRateLimitServiceClient(conn)
	resp, err := client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "edge_proxy_per_ip", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "198.51.100.1"}},
	}}})
	require.NoError(t, err)
	require.Equal(t, pb.RateLimitResponse_OK, resp.OverallCode)
	require.Equal(t, uint32(5), resp.Statuses[0].LimitRemaining)
	require.Equal(t, "ratelimit-policy", resp.ResponseHeadersToAdd[0].Key)
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, h.Status)
	code, body := get(t, "http://"+s.addr+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `sluice_rls_within_limit_total{domain="edge_proxy_per_ip",key="remote_address"} 1`)

	require.Equal(t, cli.ExitOK, s.stop(t), s.stderr.String())
	require.Contains(t, s.stderr.String(), "envoy rate limit service listening")
	require.Contains(t, s.stderr.String(), "msg=stopped")
}

func TestServeRLSUsage(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o600))
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--grpc-addr", "127.0.0.1:0"}, cli.ExitUsage, "--grpc-addr and --rls-config go together"},
		{[]string{"--rls-config", rlsConfig}, cli.ExitUsage, "--grpc-addr and --rls-config go together"},
		{[]string{"--grpc-addr", "nope", "--rls-config", rlsConfig}, cli.ExitUsage, `invalid --grpc-addr "nope"`},
		{[]string{"--grpc-addr", "127.0.0.1:0", "--rls-config", rlsConfig, "--rls-headers", "x"}, cli.ExitUsage, `invalid --rls-headers "x"`},
		{[]string{"--addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--rls-config", bad}, cli.ExitFailure,
			bad + `:4:24: descriptors[0].rate_limit.unit: invalid rate limit unit "fortnight"`},
	} {
		r := run(t, map[string]string{"SLUICE_DB": "sqlite:" + filepath.Join(t.TempDir(), "r.db")}, append([]string{"serve"}, c.args...)...)
		require.Equal(t, c.code, r.code, "%v: %s", c.args, r.stderr)
		require.Contains(t, r.stderr, c.msg, c.args)
	}
}

// TestServeRLSAuth: with tokens, the gRPC service honours the HTTP API's:
// ShouldRateLimit needs a bearer token with scope take in the
// "authorization" metadata; health stays open, as /healthz does; and
// without tokens a gRPC address that is not loopback-only is refused.
func TestServeRLSAuth(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n"), 0o600))
	taker, takerLine := mint(t, "edge", "take")
	reader, readerLine := mint(t, "viewer", "read")
	tokens := writeFile(t, "tokens", takerLine+"\n"+readerLine+"\n")
	s := startServe(t, nil, "--addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--rls-config", cfg, "--tokens", tokens, "--watch=false")
	m := regexp.MustCompile(`sluice rate limit service listening on grpc://(\S+)`).FindStringSubmatch(s.stdout.String())
	require.NotNil(t, m, s.stdout.String())
	conn, err := grpc.NewClient(m[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := pb.NewRateLimitServiceClient(conn)
	req := &pb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}},
	}}}
	_, err = client.ShouldRateLimit(ctx, req)
	require.Equal(t, codes.Unauthenticated, status.Code(err), "no token: %v", err)
	_, err = client.ShouldRateLimit(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+reader), req)
	require.Equal(t, codes.PermissionDenied, status.Code(err), "a read token: %v", err)
	resp, err := client.ShouldRateLimit(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+taker), req)
	require.NoError(t, err)
	require.Equal(t, pb.RateLimitResponse_OK, resp.OverallCode)
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, h.Status)
	require.Equal(t, cli.ExitOK, s.stop(t), s.stderr.String())

	r := run(t, map[string]string{"SLUICE_DB": "sqlite:" + filepath.Join(t.TempDir(), "r.db")},
		"serve", "--addr", "127.0.0.1:0", "--grpc-addr", "0.0.0.0:0", "--rls-config", cfg)
	require.Equal(t, cli.ExitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "refusing to serve gRPC on 0.0.0.0:0 without tokens")
}
