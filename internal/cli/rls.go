package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/sluicerl/sluice/auth"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/rls"
)

// rlsFlags are serve's flags for the Envoy rate limit service.
type rlsFlags struct {
	grpcAddr string
	config   string
	headers  string
}

func (r *rlsFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&r.grpcAddr, "grpc-addr", "",
		"`host:port` of the Envoy rate limit service, gRPC (env SLUICE_GRPC_ADDR); needs --rls-config")
	fs.StringVar(&r.config, "rls-config", "",
		"envoyproxy/ratelimit configuration `files`, comma-separated; a directory loads its *.yaml and *.yml files (env SLUICE_RLS_CONFIG)")
	fs.StringVar(&r.headers, "rls-headers", rls.HeadersXRateLimit.String(),
		"response headers ShouldRateLimit asks Envoy to add: x-ratelimit, ietf (RateLimit, RateLimit-Policy), both or none (env SLUICE_RLS_HEADERS)")
}

var rlsEnv = []envFlag{
	{"grpc-addr", "SLUICE_GRPC_ADDR"},
	{"rls-config", "SLUICE_RLS_CONFIG"},
	{"rls-headers", "SLUICE_RLS_HEADERS"},
}

func (r *rlsFlags) validate(source map[string]string) error {
	if (r.grpcAddr == "") != (r.config == "") {
		return usagef("%s and %s go together: the rate limit service needs an address and a configuration", source["grpc-addr"], source["rls-config"])
	}
	if r.grpcAddr != "" {
		if err := checkAddr(r.grpcAddr); err != nil {
			return usagef("invalid %s %q: %v", source["grpc-addr"], r.grpcAddr, err)
		}
	}
	if _, err := rls.ParseHeaderMode(r.headers); err != nil {
		return usagef("invalid %s %q: want x-ratelimit, ietf, both or none", source["rls-headers"], r.headers)
	}
	return nil
}

// load parses the rate limit service's configuration: nil without one.
func (r *rlsFlags) load() (*rls.Rules, error) {
	if r.config == "" {
		return nil, nil
	}
	var paths []string
	for _, p := range strings.Split(r.config, ",") {
		if p = strings.TrimSpace(p); p != "" {
			paths = append(paths, p)
		}
	}
	return rls.LoadFiles(paths...)
}

// rlsServer is the running gRPC server, or nil.
type rlsServer struct {
	srv      *rls.Server
	done     chan struct{} // closed when Serve returns
	serveErr error         // Serve's result, once done is closed
	stopOnce sync.Once
	stopErr  error
}

// startRLS listens on --grpc-addr and serves the rate limit service over
// lim; it returns nil when rules is nil.
func startRLS(ctx context.Context, opts *Options, f *rlsFlags, rules *rls.Rules, lim *limiter.Limiter,
	reg prometheus.Registerer, log *slog.Logger, keys *auth.Keyring) (*rlsServer, error) {
	if rules == nil {
		return nil, nil
	}
	headers, _ := rls.ParseHeaderMode(f.headers) // validated
	svc, err := rls.New(rls.Config{Rules: rules, Limiter: lim, Registry: reg, Logger: log, Headers: headers})
	if err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", f.grpcAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", f.grpcAddr, err)
	}
	// The same tokens as the HTTP API (nil keys: auth is off): the rate
	// limit call needs scope take; health and reflection are open, as
	// /healthz is; any other method is refused.
	scopes := func(method string) auth.Scope {
		switch {
		case strings.HasPrefix(method, "/envoy.service.ratelimit."):
			return auth.Take
		case strings.HasPrefix(method, "/grpc.health.v1."), strings.HasPrefix(method, "/grpc.reflection."):
			return auth.Public
		}
		return 0
	}
	s := &rlsServer{srv: rls.NewServer(svc, rls.ServerConfig{
		UnaryInterceptors:  []grpc.UnaryServerInterceptor{auth.UnaryServerInterceptor(keys, scopes)},
		StreamInterceptors: []grpc.StreamServerInterceptor{auth.StreamServerInterceptor(keys, scopes)},
	}), done: make(chan struct{})}
	go func() {
		s.serveErr = s.srv.Serve(ln)
		close(s.done)
	}()
	log.Info("envoy rate limit service listening", "grpc_addr", ln.Addr().String(), "domains", len(rules.Domains()),
		"policies", len(rules.Policies()), "rls_config", f.config)
	fmt.Fprintf(opts.Stdout, "sluice rate limit service listening on grpc://%s\n", ln.Addr())
	return s, nil
}

// stopped is closed when the server stops serving (then err says why),
// or nil, which never delivers, without a server.
func (s *rlsServer) stopped() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.done
}

func (s *rlsServer) err() error { return fmt.Errorf("serve gRPC: %w", s.serveErr) }

// shutdown stops the server gracefully within ctx; later calls return the
// first one's result.
func (s *rlsServer) shutdown(ctx context.Context) error {
	if s == nil {
		return nil
	}
	s.stopOnce.Do(func() {
		if err := s.srv.Shutdown(ctx); err != nil {
			s.stopErr = fmt.Errorf("shutdown: in-flight gRPC calls did not finish: %w", err)
		}
		<-s.done
	})
	return s.stopErr
}
