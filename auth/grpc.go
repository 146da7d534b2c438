package auth

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// MethodScopes says which scope a gRPC method (its full name,
// "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit") needs.
// Returning Public lets it through without a token (health checks,
// reflection); returning 0 refuses it (PermissionDenied), so that a
// method nobody classified is never open by accident.
type MethodScopes func(fullMethod string) Scope

// UnaryServerInterceptor authenticates unary calls against k with the
// bearer token of the "authorization" metadata (the same tokens as the
// HTTP API): codes.Unauthenticated without a known token,
// codes.PermissionDenied without the method's scope. The handler's ctx
// carries the Principal (FromContext). A nil k lets every call through
// (auth off), as a nil server.Config.Auth does.
func UnaryServerInterceptor(k *Keyring, scopes MethodScopes) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := check(ctx, k, scopes, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streams.
func StreamServerInterceptor(k *Keyring, scopes MethodScopes) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := check(ss.Context(), k, scopes, info.FullMethod)
		if err != nil {
			return err
		}
		return handler(srv, &stream{ServerStream: ss, ctx: ctx})
	}
}

type stream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *stream) Context() context.Context { return s.ctx }

func check(ctx context.Context, k *Keyring, scopes MethodScopes, method string) (context.Context, error) {
	if k == nil {
		return ctx, nil // no auth, as server.Config.Auth nil
	}
	need := scopes(method)
	if need == Public {
		return ctx, nil
	}
	if need == 0 || !need.single() {
		return nil, status.Errorf(codes.PermissionDenied, "auth: method %s has no scope configured; refused", method)
	}
	var authz string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			authz = v[0]
		}
	}
	p, err := k.Authenticate(authz, need)
	switch {
	case err == nil:
		return NewContext(ctx, p), nil
	case errors.Is(err, ErrForbidden):
		return nil, status.Errorf(codes.PermissionDenied, "auth: token %q lacks scope %q, which %s needs", p.Name, need, method)
	default:
		return nil, status.Errorf(codes.Unauthenticated, "%v: send metadata \"authorization: Bearer <token>\"", err)
	}
}

type principalKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the Principal ctx carries, if any.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}
