package server_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/server"
)

// FuzzTakeRequest posts arbitrary bodies to POST /v1/take: the server must
// never panic nor answer 5xx (the store is in memory and healthy), and every
// answer must be a decision or a problem, each well-formed JSON. The seed
// corpus is in testdata/fuzz/FuzzTakeRequest.
func FuzzTakeRequest(f *testing.F) {
	lim, err := limiter.New(limiter.Config{Policies: testPolicies})
	if err != nil {
		f.Fatal(err)
	}
	srv, err := server.New(server.Config{Limiter: lim, MaxBodyBytes: 4096, MaxItems: 8})
	if err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/v1/take", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
		var out map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("status %d: body is not JSON: %v: %q", rec.Code, err, rec.Body)
		}
		switch rec.Code {
		case http.StatusOK, http.StatusTooManyRequests:
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Fatalf("decision with Content-Type %q", ct)
			}
			if rec.Header().Get("RateLimit") == "" || rec.Header().Get("RateLimit-Policy") == "" {
				t.Fatalf("decision without RateLimit headers: %v", rec.Header())
			}
			if _, ok := out["allowed"].(bool); !ok {
				t.Fatalf("decision without allowed: %s", rec.Body)
			}
			if (rec.Code == http.StatusTooManyRequests) != (rec.Header().Get("Retry-After") != "") {
				t.Fatalf("status %d with Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
			}
		default:
			if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("status %d with Content-Type %q", rec.Code, ct)
			}
			if st, _ := out["status"].(float64); int(st) != rec.Code {
				t.Fatalf("problem status %v, response status %d", out["status"], rec.Code)
			}
			if d, _ := out["detail"].(string); d == "" {
				t.Fatalf("problem without detail: %s", rec.Body)
			}
		}
	})
}
