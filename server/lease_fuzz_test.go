package server_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/server"
)

// FuzzLeaseRequest posts arbitrary bodies to POST /v1/leases and uses them
// as lease ids for renew and release: the server must never panic nor
// answer 5xx (the store is in memory and healthy); a granted lease is 201
// with an id and a token, whose renew and release then succeed; everything
// else is a well-formed problem, and an arbitrary id is a 422 at #/path/id
// or a 404. The seed corpus is in
// testdata/fuzz/FuzzLeaseRequest.
func FuzzLeaseRequest(f *testing.F) {
	lim, err := limiter.New(limiter.Config{Policies: leasePolicies})
	if err != nil {
		f.Fatal(err)
	}
	srv, err := server.New(server.Config{Limiter: lim, MaxBodyBytes: 4096, MaxItems: 8})
	if err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()
	do := func(t *testing.T, method, target string, body []byte) (*httptest.ResponseRecorder, map[string]any) {
		req := httptest.NewRequest(method, target, bytes.NewReader(body))
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s: status %d for %q: %s", method, target, rec.Code, body, rec.Body)
		}
		if rec.Code == http.StatusNoContent {
			return rec, nil
		}
		var out map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s %s: status %d: body is not JSON: %v: %q", method, target, rec.Code, err, rec.Body)
		}
		if rec.Code >= 400 {
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
		return rec, out
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rec, out := do(t, http.MethodPost, "/v1/leases", body)
		if rec.Code == http.StatusCreated {
			id, _ := out["id"].(string)
			if tok, _ := out["token"].(float64); id == "" || tok <= 0 {
				t.Fatalf("lease without id or token: %s", rec.Body)
			}
			if rec, _ := do(t, http.MethodPost, "/v1/leases/"+id+"/renew", nil); rec.Code != http.StatusOK {
				t.Fatalf("renew of a fresh lease: %d %s", rec.Code, rec.Body)
			}
			if rec, _ := do(t, http.MethodDelete, "/v1/leases/"+id, nil); rec.Code != http.StatusNoContent {
				t.Fatalf("release of a fresh lease: %d %s", rec.Code, rec.Body)
			}
		}
		id := url.PathEscape(string(body))
		if id == "" || id == "." || id == ".." {
			return // not a path segment: the mux redirects to the cleaned path
		}
		// Nothing is held: an id is either not one the API issues (422,
		// at #/path/id) or names a lease not held (404).
		for _, op := range []struct{ method, target string }{
			{http.MethodPost, "/v1/leases/" + id + "/renew"}, {http.MethodDelete, "/v1/leases/" + id},
		} {
			rec, out := do(t, op.method, op.target, nil)
			switch rec.Code {
			case http.StatusNotFound:
			case http.StatusUnprocessableEntity:
				errs, _ := out["errors"].([]any)
				if len(errs) != 1 || errs[0].(map[string]any)["pointer"] != "#/path/id" {
					t.Fatalf("%s %s: 422 not at #/path/id: %s", op.method, op.target, rec.Body)
				}
			default:
				t.Fatalf("%s %s: status %d, want 404 or 422: %s", op.method, op.target, rec.Code, rec.Body)
			}
		}
	})
}
