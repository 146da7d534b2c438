package server

import (
	"errors"
	"net/http"
	"strings"

	"github.com/sluicerl/sluice/auth"
	"github.com/sluicerl/sluice/store"
)

// authorize checks the request's bearer token for scope when the server
// has Config.Auth, recording the principal in rs. It answers 401 (no
// token, a malformed header, an unknown token; with a WWW-Authenticate
// challenge, RFC 6750) or 403 (a valid token without the scope) and
// reports false, or reports true. Public routes need no token.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, scope auth.Scope, rs *reqState) bool {
	if s.auth == nil || scope == auth.Public {
		return true
	}
	p, err := s.auth.Authenticate(r.Header.Get("Authorization"), scope)
	switch {
	case err == nil:
		rs.principal = p
		return true
	case errors.Is(err, auth.ErrForbidden):
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice", error="insufficient_scope", scope="`+scope.String()+`"`)
		writeProblem(w, &problem{Type: TypeForbidden, Title: "Forbidden", Status: http.StatusForbidden,
			Detail: "token " + quote(p.Name) + " has scopes " + quote(p.Scopes.String()) + "; this endpoint needs " + quote(scope.String())})
		return false
	case errors.Is(err, auth.ErrNoToken):
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
		writeProblem(w, &problem{Type: TypeUnauthorized, Title: "Unauthorized", Status: http.StatusUnauthorized,
			Detail: "this endpoint needs a bearer token with scope " + quote(scope.String()) + ": send Authorization: Bearer <token>"})
	default:
		detail := "the token is not one this server knows (wrong, revoked or mistyped)"
		if errors.Is(err, auth.ErrMalformed) {
			detail = "the Authorization header must be \"Bearer <token>\""
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice", error="invalid_token"`)
		writeProblem(w, &problem{Type: TypeUnauthorized, Title: "Unauthorized", Status: http.StatusUnauthorized, Detail: detail})
	}
	return false
}

func quote(s string) string { return `"` + s + `"` }

// holderSep separates a token's name from the holder a client chose, in
// the holder a lease is stored under when the server has auth.
const holderSep = "/"

// boundHolder is the holder a lease is stored under: with auth, the
// caller's token name, "/", then the holder it chose ("ci-worker/w1"), so
// that a lease acquired with one token can be renewed or released only
// with that token, even by a caller that learns or guesses the holder
// and fencing token. It reports false when the result is too long.
func (s *Server) boundHolder(r *http.Request, holder string) (string, bool) {
	rs := stateOf(r)
	if s.auth == nil || rs == nil || rs.principal.Name == "" {
		return holder, true
	}
	if strings.HasPrefix(holder, rs.principal.Name+holderSep) {
		return holder, true // already bound: an acquire again with the holder an answer gave
	}
	b := rs.principal.Name + holderSep + holder
	return b, len(b) <= store.MaxHolderLen
}

// holderOf reports whether the caller may renew or release l: always
// without auth (the lease id, which holds the holder id and fencing
// token, is the credential), and with auth only with the token that
// acquired it. Otherwise it answers 403.
func (s *Server) holderOf(w http.ResponseWriter, r *http.Request, l store.Lease) bool {
	rs := stateOf(r)
	if s.auth == nil || rs == nil || strings.HasPrefix(l.Holder, rs.principal.Name+holderSep) {
		return true
	}
	writeProblem(w, &problem{Type: TypeForbidden, Title: "Forbidden", Status: http.StatusForbidden,
		Detail: "the lease was acquired with another token; only its holder may renew or release it"})
	return false
}
