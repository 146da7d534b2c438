package rls

import (
	"context"
	"net"
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
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// serve runs b's service on ln with cfg, and returns a client connection.
func serve(t *testing.T, b *bundle, ln net.Listener, cfg ServerConfig, dial ...grpc.DialOption) (*Server, *grpc.ClientConn) {
	t.Helper()
	srv := NewServer(b.svc, cfg)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = srv.Shutdown(ctx)
		require.NoError(t, <-served)
	})
	dial = append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))
	target := "passthrough:///" + ln.Addr().String()
	conn, err := grpc.NewClient(target, dial...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return srv, conn
}

func bufListener(t *testing.T) (*bufconn.Listener, grpc.DialOption) {
	ln := bufconn.Listen(1 << 20)
	return ln, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) })
}

func TestGRPCEndToEnd(t *testing.T) {
	t.Parallel()
	b := setup(t, configText(t, "testdata/envoy/example_example.yaml"), Config{})
	// An interceptor of the caller's (as authentication will be) runs
	// before the service and can refuse.
	var seen []string
	auth := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		seen = append(seen, info.FullMethod)
		if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("authorization")) == 0 && info.FullMethod == "/"+ServiceName+"/ShouldRateLimit" {
			return nil, status.Error(codes.Unauthenticated, "no token")
		}
		return h(ctx, req)
	}
	ln, dialer := bufListener(t)
	_, conn := serve(t, b, ln, ServerConfig{UnaryInterceptors: []grpc.UnaryServerInterceptor{auth}}, dialer)
	client := pb.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	req := &pb.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc("source_cluster", "proxy", "destination_cluster", "mock"),
		desc("qux", "any"),
	}}
	_, err := client.ShouldRateLimit(ctx, req)
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	actx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer x")
	resp, err := client.ShouldRateLimit(actx, req)
	require.NoError(t, err)
	require.Equal(t, pb.RateLimitResponse_OK, resp.OverallCode)
	require.Equal(t, uint32(0), resp.Statuses[0].LimitRemaining)
	resp, err = client.ShouldRateLimit(actx, req)
	require.NoError(t, err)
	require.Equal(t, pb.RateLimitResponse_OVER_LIMIT, resp.OverallCode)
	require.Equal(t, pb.RateLimitResponse_OVER_LIMIT, resp.Statuses[0].Code)
	require.Equal(t, pb.RateLimitResponse_OK, resp.Statuses[1].Code)
	require.Equal(t, int64(60), resp.Statuses[0].DurationUntilReset.Seconds)
	require.Len(t, resp.ResponseHeadersToAdd, 3)
	_, err = client.ShouldRateLimit(actx, &pb.RateLimitRequest{Domain: "rl"})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Len(t, seen, 4)

	// Health.
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: ServiceName})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, h.Status)

	// Reflection lists the service.
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}))
	rr, err := stream.Recv()
	require.NoError(t, err)
	var names []string
	for _, s := range rr.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	require.Contains(t, names, ServiceName)
	require.Contains(t, names, "grpc.health.v1.Health")
	require.NoError(t, stream.CloseSend())
}

// One real listener on 127.0.0.1, and a graceful shutdown that turns
// health to NOT_SERVING first.
func TestGRPCRealListener(t *testing.T) {
	t.Parallel()
	b := setup(t, configText(t, "testdata/envoy/readme_03_edge_proxy_per_ip.yaml"), Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := NewServer(b.svc, ServerConfig{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := pb.NewRateLimitServiceClient(conn)
	for i := range 11 {
		resp, err := client.ShouldRateLimit(ctx, &pb.RateLimitRequest{
			Domain: "edge_proxy_per_ip", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "10.1.2.3")},
		})
		require.NoError(t, err)
		want := pb.RateLimitResponse_OK
		if i == 10 {
			want = pb.RateLimitResponse_OVER_LIMIT
		}
		require.Equal(t, want, resp.OverallCode, "request %d", i)
	}
	health := healthpb.NewHealthClient(conn)
	wctx, stopWatch := context.WithCancel(ctx)
	watch, err := health.Watch(wctx, &healthpb.HealthCheckRequest{Service: ServiceName})
	require.NoError(t, err)
	first, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, first.Status)
	stopped := make(chan error, 1)
	go func() { stopped <- srv.Shutdown(ctx) }()
	next, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, next.Status)
	stopWatch() // a graceful stop waits for open streams
	require.NoError(t, <-stopped)
	require.NoError(t, <-served)
}
