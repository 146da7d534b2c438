package server_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/server"
)

func ExampleServer() {
	lim, err := limiter.New(limiter.Config{Policies: []limiter.Policy{
		{Name: "api", Rate: 10, Period: time.Second},
	}})
	if err != nil {
		panic(err)
	}
	srv, err := server.New(server.Config{Limiter: lim})
	if err != nil {
		panic(err)
	}
	// Mount srv.Handler() on a server you own; here, a recorder.
	req := httptest.NewRequest(http.MethodPost, "/v1/take", strings.NewReader(`{"policy":"api","key":"user-42"}`))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)

	fmt.Println(rec.Code)
	fmt.Println("RateLimit-Policy:", rec.Header().Get("RateLimit-Policy"))
	fmt.Println("RateLimit:", rec.Header().Get("RateLimit"))
	fmt.Print(rec.Body)
	// Output:
	// 200
	// RateLimit-Policy: "api";q=10;w=1
	// RateLimit: "api";r=9;t=1
	// {"allowed":true,"policy":"api","limit":10,"remaining":9,"retryAfterMs":0,"resetAfterMs":100,"shadowed":false}
}
