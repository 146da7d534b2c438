package bench

import (
	"net/http"
	"strconv"

	"github.com/sluicerl/sluice/auth"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/server"
)

// TakeHandler returns Sluice's HTTP API over lim, as `sluice serve` mounts
// it: server.New with every other setting at its default.
func TakeHandler(lim *limiter.Limiter) (http.Handler, error) {
	s, err := server.New(server.Config{Limiter: lim})
	if err != nil {
		return nil, err
	}
	return s.Handler(), nil
}

// AuthTokens is the size of the token set TakeHandlerAuth configures: a
// small deployment's, each request's token compared with every one.
const AuthTokens = 10

// TakeHandlerAuth is TakeHandler with bearer-token auth on, as `sluice
// serve --tokens` runs it: a set of AuthTokens tokens with scope take, of
// which it returns one to send.
func TakeHandlerAuth(lim *limiter.Limiter) (http.Handler, string, error) {
	specs := make([]auth.Spec, AuthTokens)
	var token string
	for i := range specs {
		token = auth.NewToken()
		specs[i] = auth.Spec{Name: "worker-" + strconv.Itoa(i), Scopes: auth.Take, SHA256: auth.Hash(token)}
	}
	ts, err := auth.New(specs)
	if err != nil {
		return nil, "", err
	}
	s, err := server.New(server.Config{Limiter: lim, Auth: auth.NewKeyring(ts)})
	if err != nil {
		return nil, "", err
	}
	return s.Handler(), token, nil
}
