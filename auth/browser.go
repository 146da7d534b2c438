package auth

import (
	"errors"
	"net/http"
	"strings"
)

// Browser guards pages a person opens in a browser (the dashboard), which
// cannot send a bearer token by themselves: with k set, a request needs
// an Authorization header holding a token with scope need (scope admin
// for state-changing methods, POST and the like), either as "Bearer
// <token>" or as HTTP Basic with the token as the password (any user
// name), which a browser asks for once and then sends with every request
// of the page, its fetches included. A Basic header is rewritten to the
// bearer form before next runs, so that what next forwards to the API
// carries the same credential. No or an unknown token is 401 with a
// Basic challenge (the browser's login prompt); a token without the scope
// is 403. A nil k lets every request through (auth is off).
func Browser(k *Keyring, realm string, next http.Handler) http.Handler {
	if k == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		if _, pass, ok := r.BasicAuth(); ok {
			h = "Bearer " + pass
		}
		need := Read
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			need = Admin
		}
		_, err := k.Authenticate(h, need)
		switch {
		case errors.Is(err, ErrForbidden):
			http.Error(w, "forbidden: the token lacks scope "+need.String(), http.StatusForbidden)
			return
		case err != nil:
			w.Header().Set("WWW-Authenticate", `Basic realm="`+strings.ReplaceAll(realm, `"`, "'")+`", charset="UTF-8"`)
			http.Error(w, "unauthorized: give a token (as the password of the browser's prompt, or as a bearer token)", http.StatusUnauthorized)
			return
		}
		r2 := r.Clone(r.Context())
		r2.Header.Set("Authorization", h)
		next.ServeHTTP(w, r2)
	})
}
