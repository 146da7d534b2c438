package signal

import (
	"net/http"
	"testing"
)

func BenchmarkParse(b *testing.B) {
	p, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name   string
		status int
		h      http.Header
		body   []byte
	}{
		{"none", 200, hdr("Content-Type", "application/json"), nil},
		{"retry-after-seconds", 429, hdr("Retry-After", "30"), nil},
		{"retry-after-date", 429, hdr("Retry-After", "Tue, 01 Jan 2030 00:01:30 GMT"), nil},
		{"ietf-two-policies", 200, hdr("RateLimit-Policy", `"day";q=1000;w=86400, "burst";q=100;w=60`, "RateLimit", `"day";r=3;t=7200, "burst";r=40;t=10`), nil},
		{"x-ratelimit", 200, hdr("X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "4987", "X-RateLimit-Reset", "1893456300"), nil},
		{"shopify-rest", 200, hdr("X-Shopify-Shop-Api-Call-Limit", "32/40"), nil},
		{"binance", 200, hdr("X-MBX-USED-WEIGHT-1M", "1187", "X-MBX-ORDER-COUNT-10S", "3", "X-MBX-ORDER-COUNT-1D", "250"), nil},
		{"shopify-graphql", 200, nil, []byte(`{"data":{"shop":{"name":"x"}},"extensions":{"cost":{"requestedQueryCost":12,"actualQueryCost":7,"throttleStatus":{"maximumAvailable":1000.0,"currentlyAvailable":993,"restoreRate":50.0}}}}`)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var rep Report
			for b.Loop() {
				p.ParseTo(&rep, t0, Response{Status: bc.status, Header: bc.h, Body: bc.body})
			}
		})
	}
}
