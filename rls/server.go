package rls

import (
	"context"
	"net"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// ServiceName is the gRPC service ShouldRateLimit belongs to, and the name
// the health service reports it under.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// ServerConfig is what the caller adds to the gRPC server NewServer
// builds: its own options (TLS credentials, message size limits,
// keepalive) and interceptors (authentication), which run in the order
// given, before the service. The zero value adds nothing.
//
// NewServer's own option, which Options may override, is
// grpc.NumStreamWorkers(StreamWorkers).
type ServerConfig struct {
	Options            []grpc.ServerOption
	UnaryInterceptors  []grpc.UnaryServerInterceptor
	StreamInterceptors []grpc.StreamServerInterceptor
}

// StreamWorkers is how many goroutines NewServer's server keeps to run
// calls on (grpc.NumStreamWorkers): a call runs on an idle one, or on a
// goroutine of its own when none is idle. Reused goroutines keep the stack
// a call grew, which a new goroutine grows again by copying, call after
// call (runtime.newstack was 8 to 14% of the CPU profile of sluice serve
// under rlsbench at 16 and 64 streams without them).
const StreamWorkers = 64

// Server is a gRPC server holding a Service, the standard health service
// (grpc.health.v1, SERVING for "" and ServiceName until Shutdown) and
// server reflection. It is safe for concurrent use.
type Server struct {
	grpc   *grpc.Server
	health *health.Server
}

// NewServer returns a Server for svc. Callers that own a grpc.Server of
// their own register svc on it with pb.RegisterRateLimitServiceServer
// instead.
func NewServer(svc *Service, cfg ServerConfig) *Server {
	opts := append([]grpc.ServerOption{grpc.NumStreamWorkers(StreamWorkers)}, cfg.Options...)
	if len(cfg.UnaryInterceptors) > 0 {
		opts = append(opts, grpc.ChainUnaryInterceptor(cfg.UnaryInterceptors...))
	}
	if len(cfg.StreamInterceptors) > 0 {
		opts = append(opts, grpc.ChainStreamInterceptor(cfg.StreamInterceptors...))
	}
	gs := grpc.NewServer(opts...)
	pb.RegisterRateLimitServiceServer(gs, svc)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	return &Server{grpc: gs, health: hs}
}

// GRPC returns the underlying grpc.Server.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// Serve accepts connections on ln until Shutdown; see grpc.Server.Serve.
func (s *Server) Serve(ln net.Listener) error { return s.grpc.Serve(ln) }

// Shutdown reports NOT_SERVING to health checks, stops accepting calls and
// waits for those in flight to finish. When ctx ends first it closes every
// connection and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.health.Shutdown()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
		return ctx.Err()
	}
}
