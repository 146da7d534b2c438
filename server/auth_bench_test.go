package server_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicerl/sluice/auth"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/server"
)

// BenchmarkTakeHandler is one POST /v1/take through the server's handler,
// without the network, without and with auth (10 tokens): what auth adds
// to the server's own work per request.
func BenchmarkTakeHandler(b *testing.B) {
	for _, withAuth := range []bool{false, true} {
		name := map[bool]string{false: "auth=off", true: "auth=on"}[withAuth]
		b.Run(name, func(b *testing.B) {
			lim, err := limiter.New(limiter.Config{Policies: []limiter.Policy{{Name: "p", Rate: 1e6, Period: time.Second, Burst: 1 << 40}}})
			if err != nil {
				b.Fatal(err)
			}
			cfg := server.Config{Limiter: lim}
			var token string
			if withAuth {
				specs := make([]auth.Spec, 10)
				for i := range specs {
					token = auth.NewToken()
					specs[i] = auth.Spec{Name: "w" + strconv.Itoa(i), Scopes: auth.Take, SHA256: auth.Hash(token)}
				}
				ts, err := auth.New(specs)
				if err != nil {
					b.Fatal(err)
				}
				cfg.Auth = auth.NewKeyring(ts)
			}
			srv, err := server.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			h := srv.Handler()
			body := `{"policy":"p","key":"k","cost":1}`
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v1/take", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if token != "" {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatal(rec.Code, rec.Body.String())
				}
			}
		})
	}
}
