package bench

import (
	"net/http"

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
