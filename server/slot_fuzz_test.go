package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/server"
	"github.com/sluicerl/sluice/slot"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

// FuzzSlotRequest posts arbitrary bodies to the slot API's three POST
// bodies (which = 0 assign, 1 batch, 2 config): the server must never
// panic nor answer 5xx (the SQLite store is healthy), and every answer is a
// slot, a batch, a config, or a problem with a detail, each well-formed
// JSON. The seed corpus is in testdata/fuzz/FuzzSlotRequest.
func FuzzSlotRequest(f *testing.F) {
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(f.TempDir(), "slots.db"), sqlitestore.Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = st.Close() })
	sch, err := slot.New(slot.Config{Store: st, MaxBatch: 16})
	if err != nil {
		f.Fatal(err)
	}
	if _, err := sch.PutConfig(ctx, store.SlotConfig{Name: "default", MaxPerWindow: 3, WindowSize: 4 * time.Second, Headroom: 1000}); err != nil {
		f.Fatal(err)
	}
	lim, err := limiter.New(limiter.Config{Policies: testPolicies})
	if err != nil {
		f.Fatal(err)
	}
	srv, err := server.New(server.Config{Limiter: lim, Slots: sch, MaxBodyBytes: 8192})
	if err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()
	paths := []string{"/api/v1/slots", "/api/v1/slots/batch", "/admin/rate-limit/config"}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		path := paths[int(which)%len(paths)]
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s: status %d for %q: %s", path, rec.Code, body, rec.Body)
		}
		var out map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s: status %d: body is not JSON: %v: %q", path, rec.Code, err, rec.Body)
		}
		switch rec.Code {
		case http.StatusOK, http.StatusCreated:
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Fatalf("%s: answer with Content-Type %q", path, ct)
			}
			key := map[string]string{paths[0]: "scheduledTime", paths[1]: "results", paths[2]: "windowSize"}[path]
			if _, ok := out[key]; !ok {
				t.Fatalf("%s: answer without %s: %s", path, key, rec.Body)
			}
		default:
			if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("%s: status %d with Content-Type %q", path, rec.Code, ct)
			}
			if st, _ := out["status"].(float64); int(st) != rec.Code {
				t.Fatalf("%s: problem status %v, response status %d", path, out["status"], rec.Code)
			}
			if d, _ := out["detail"].(string); d == "" {
				t.Fatalf("%s: problem without detail: %s", path, rec.Body)
			}
		}
	})
}
