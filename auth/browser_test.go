package auth_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/auth"
)

// TestBrowser: the dashboard's guard asks a browser for the token (Basic,
// token as the password), accepts a bearer token too, hands the API the
// bearer form, needs scope read to look and admin to act, and is a no-op
// without tokens.
func TestBrowser(t *testing.T) {
	t.Parallel()
	reader, admin := auth.NewToken(), auth.NewToken()
	ts, err := auth.New([]auth.Spec{
		{Name: "viewer", Scopes: auth.Read, SHA256: auth.Hash(reader)},
		{Name: "ops", Scopes: auth.Read | auth.Admin, SHA256: auth.Hash(admin)},
	})
	require.NoError(t, err)
	var seen string
	h := auth.Browser(auth.NewKeyring(ts), "sluice", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Header.Get("Authorization")
	}))
	do := func(method string, set func(*http.Request)) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, "/ui/", nil)
		if set != nil {
			set(req)
		}
		rec := httptest.NewRecorder()
		seen = ""
		h.ServeHTTP(rec, req)
		return rec
	}
	rec := do(http.MethodGet, nil)
	require.Equal(t, http.StatusUnauthorized, rec.Code)
	require.Equal(t, `Basic realm="sluice", charset="UTF-8"`, rec.Header().Get("WWW-Authenticate"))
	require.Empty(t, seen)
	rec = do(http.MethodGet, func(r *http.Request) { r.SetBasicAuth("me", "sluice_wrong") })
	require.Equal(t, http.StatusUnauthorized, rec.Code)

	rec = do(http.MethodGet, func(r *http.Request) { r.SetBasicAuth("anyone", reader) })
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "Bearer "+reader, seen, "the API behind gets the bearer form")
	rec = do(http.MethodGet, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+reader) })
	require.Equal(t, http.StatusOK, rec.Code)

	rec = do(http.MethodPost, func(r *http.Request) { r.SetBasicAuth("", reader) })
	require.Equal(t, http.StatusForbidden, rec.Code, "acting needs scope admin")
	require.Empty(t, seen)
	rec = do(http.MethodPost, func(r *http.Request) { r.SetBasicAuth("", admin) })
	require.Equal(t, http.StatusOK, rec.Code)

	open := auth.Browser(nil, "sluice", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	rec = httptest.NewRecorder()
	open.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/ui/", nil))
	require.Equal(t, http.StatusOK, rec.Code, "no tokens: auth is off")
}
