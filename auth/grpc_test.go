package auth_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicerl/sluice/auth"
)

// TestGRPCInterceptor runs a real gRPC server on 127.0.0.1 with the
// interceptors, and calls it through a real client: the health service's
// Check needs "read" here, List is unclassified (refused), Watch (a
// stream) is public.
func TestGRPCInterceptor(t *testing.T) {
	t.Parallel()
	reader, taker := auth.NewToken(), auth.NewToken()
	k := auth.NewKeyring(tokens(t, auth.Line("reader", auth.Read, reader), auth.Line("taker", auth.Take, taker)))
	scopes := func(method string) auth.Scope {
		switch method {
		case healthpb.Health_Check_FullMethodName:
			return auth.Read
		case healthpb.Health_Watch_FullMethodName:
			return auth.Public
		}
		return 0
	}
	var seen auth.Principal
	gs := grpc.NewServer(
		grpc.ChainUnaryInterceptor(auth.UnaryServerInterceptor(k, scopes),
			func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				seen, _ = auth.FromContext(ctx)
				return h(ctx, req)
			}),
		grpc.StreamInterceptor(auth.StreamServerInterceptor(k, scopes)))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	client := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	with := func(token string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}

	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
	require.Equal(t, codes.Unauthenticated, status.Code(err), "no token: %v", err)
	_, err = client.Check(with(auth.NewToken()), &healthpb.HealthCheckRequest{})
	require.Equal(t, codes.Unauthenticated, status.Code(err), "unknown token: %v", err)
	_, err = client.Check(with(taker), &healthpb.HealthCheckRequest{})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "wrong scope: %v", err)
	require.ErrorContains(t, err, `token "taker" lacks scope "read"`)
	res, err := client.Check(with(reader), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, res.Status)
	require.Equal(t, "reader", seen.Name, "the handler's ctx carries the principal")
	_, err = client.List(with(reader), &healthpb.HealthListRequest{})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "a method with no scope is refused: %v", err)

	// The public stream needs no token.
	w, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	msg, err := w.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, msg.Status)

	// A nil Keyring is auth off: the interceptor lets the call through.
	var none *auth.Keyring
	called := false
	_, err = auth.UnaryServerInterceptor(none, scopes)(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/x/Y"},
		func(context.Context, any) (any, error) { called = true; return nil, nil })
	require.NoError(t, err)
	require.True(t, called)

	// A reload that drops the reader's token refuses it on the next call.
	k.Store(tokens(t, auth.Line("taker", auth.Take, taker)))
	_, err = client.Check(with(reader), &healthpb.HealthCheckRequest{})
	require.Equal(t, codes.Unauthenticated, status.Code(err))
}
