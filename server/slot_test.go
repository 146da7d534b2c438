package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/server"
	"github.com/sluicerl/sluice/slot"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

func slotSetup(t *testing.T, maxBatch int) *bundle {
	t.Helper()
	st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "slots.db"), sqlitestore.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	sch, err := slot.New(slot.Config{Store: st, MaxBatch: maxBatch})
	require.NoError(t, err)
	return setup(t, server.Config{Slots: sch})
}

type slotBody struct {
	EventID       string `json:"eventId"`
	ConfigName    string `json:"configName"`
	ConfigVersion int64  `json:"configVersion"`
	RequestedTime string `json:"requestedTime"`
	WindowStart   string `json:"windowStart"`
	ScheduledTime string `json:"scheduledTime"`
	Status        string `json:"status"`
}

// TestSlotSeedVerification runs the seed's verification steps 4 and 5
// verbatim, then reads the slot back.
func TestSlotSeedVerification(t *testing.T) {
	t.Parallel()
	b := slotSetup(t, 0)
	rec := b.do(t, http.MethodPost, "/admin/rate-limit/config", "application/json",
		`{"configName":"default","maxPerWindow":100,"windowSize":"PT4S"}`)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	var cfg map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &cfg))
	require.Equal(t, "default", cfg["configName"])
	require.Equal(t, "PT4S", cfg["windowSize"])
	require.EqualValues(t, 100, cfg["maxPerWindow"])
	require.EqualValues(t, 1, cfg["version"])

	rec = b.do(t, http.MethodPost, "/api/v1/slots", "application/json",
		`{"eventId":"test-1","configName":"default","requestedTime":"2025-06-01T12:00:00Z"}`)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	var sl slotBody
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &sl))
	require.Equal(t, "test-1", sl.EventID)
	require.Equal(t, "default", sl.ConfigName)
	require.Equal(t, "NEW", sl.Status)
	require.Equal(t, "2025-06-01T12:00:00Z", sl.WindowStart)
	sched, err := time.Parse(time.RFC3339Nano, sl.ScheduledTime)
	require.NoError(t, err)
	ws := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	require.False(t, sched.Before(ws))
	require.True(t, sched.Before(ws.Add(4*time.Second)))

	// Again: the same slot, EXISTING.
	rec = b.do(t, http.MethodPost, "/api/v1/slots", "application/json",
		`{"eventId":"test-1","configName":"default","requestedTime":"2025-06-01T13:00:00Z"}`)
	require.Equal(t, http.StatusOK, rec.Code)
	var again slotBody
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &again))
	require.Equal(t, "EXISTING", again.Status)
	require.Equal(t, sl.ScheduledTime, again.ScheduledTime)

	rec = b.do(t, http.MethodGet, "/api/v1/slots/test-1", "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &again))
	require.Equal(t, sl.ScheduledTime, again.ScheduledTime)

	rec = b.do(t, http.MethodGet, "/admin/rate-limit/config/default", "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), `"windowSize":"PT4S"`)

	// Ids with slashes and escapes read back too.
	rec = b.do(t, http.MethodPost, "/api/v1/slots", "application/json",
		`{"eventId":"feed/7 #1","configName":"default","requestedTime":"2025-06-01T12:00:00Z"}`)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	rec = b.do(t, http.MethodGet, "/api/v1/slots/feed/7%20%231", "", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), `"eventId":"feed/7 #1"`)
}

func TestSlotBatchAndAdmin(t *testing.T) {
	t.Parallel()
	b := slotSetup(t, 0)
	rec := b.do(t, http.MethodPost, "/admin/rate-limit/config", "application/json",
		`{"configName":"bulk","maxPerWindow":2,"windowSize":"PT1S","headroom":50}`)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	var evs []string
	for i := range 5 {
		evs = append(evs, fmt.Sprintf(`{"eventId":"e%d","requestedTime":"2025-06-01T12:00:00Z"}`, i))
	}
	evs = append(evs, `{"eventId":"e0","requestedTime":"2025-06-01T12:00:00Z"}`)
	rec = b.do(t, http.MethodPost, "/api/v1/slots/batch", "application/json",
		`{"configName":"bulk","events":[`+strings.Join(evs, ",")+`]}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var out struct {
		Assigned, Existing, Exhausted int
		Results                       []slotBody
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
	require.Equal(t, 5, out.Assigned)
	require.Equal(t, 1, out.Existing)
	require.Len(t, out.Results, 6)
	require.Equal(t, "2025-06-01T12:00:02Z", out.Results[4].WindowStart)
	require.Equal(t, out.Results[0].ScheduledTime, out.Results[5].ScheduledTime)

	rec = b.do(t, http.MethodPost, "/admin/rate-limit/cache/flush", "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	rec = b.do(t, http.MethodPost, "/admin/rate-limit/config/bulk/deactivate", "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	rec = b.do(t, http.MethodGet, "/admin/rate-limit/config/bulk", "", "")
	require.Equal(t, http.StatusNotFound, rec.Code)
	rec = b.do(t, http.MethodPost, "/admin/rate-limit/config/bulk/deactivate", "", "")
	require.Equal(t, http.StatusNotFound, rec.Code)
	rec = b.do(t, http.MethodPost, "/api/v1/slots", "application/json",
		`{"eventId":"late","configName":"bulk","requestedTime":"2025-06-01T12:00:00Z"}`)
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code)
	require.Contains(t, rec.Body.String(), server.TypeUnknownConfig)
	m := b.metrics(t)
	require.Contains(t, m, `route="/api/v1/slots/batch"`)
	require.Contains(t, m, `sluice_slot_events_total{status="new"} 5`)
	require.Contains(t, m, `sluice_slot_events_total{status="existing"} 1`)
	require.Contains(t, m, `sluice_slot_store_duration_seconds_count{op="batch"} 1`)
}

func TestSlotBadInput(t *testing.T) {
	t.Parallel()
	b := slotSetup(t, 3)
	rec := b.do(t, http.MethodPost, "/admin/rate-limit/config", "application/json",
		`{"configName":"default","maxPerWindow":100,"windowSize":"PT4S"}`)
	require.Equal(t, http.StatusCreated, rec.Code)
	ev := func(id string) string { return `{"eventId":"` + id + `","requestedTime":"2025-06-01T12:00:00Z"}` }
	for _, tc := range []struct {
		name, method, path, ct, body string
		code                         int
		want                         string
	}{
		{"unknown config", "POST", "/api/v1/slots", "application/json", `{"eventId":"a","configName":"nope","requestedTime":"2025-06-01T12:00:00Z"}`, 422, "nope"},
		{"malformed time", "POST", "/api/v1/slots", "application/json", `{"eventId":"a","configName":"default","requestedTime":"June 1"}`, 422, "requestedTime must be an RFC 3339 time"},
		{"missing time", "POST", "/api/v1/slots", "application/json", `{"eventId":"a","configName":"default"}`, 422, "requestedTime is required"},
		{"empty event id", "POST", "/api/v1/slots", "application/json", `{"eventId":"","configName":"default","requestedTime":"2025-06-01T12:00:00Z"}`, 422, "eventId is required"},
		{"unknown field", "POST", "/api/v1/slots", "application/json", `{"eventId":"a","priority":1}`, 400, `unknown field \"priority\"`},
		{"unknown field pointer", "POST", "/api/v1/slots", "application/json", `{"eventId":"a","priority":1}`, 400, `"pointer":"#/priority"`},
		{"not json", "POST", "/api/v1/slots", "text/plain", `x`, 415, "Content-Type"},
		{"syntax", "POST", "/api/v1/slots", "application/json", `{"eventId":`, 400, "ends in the middle"},
		{"wrong type", "POST", "/api/v1/slots", "application/json", `{"eventId":5}`, 400, "eventId must be a string"},
		{"oversize batch", "POST", "/api/v1/slots/batch", "application/json", `{"configName":"default","events":[` + ev("a") + "," + ev("b") + "," + ev("c") + "," + ev("d") + `]}`, 422, "at most 3"},
		{"empty batch", "POST", "/api/v1/slots/batch", "application/json", `{"configName":"default","events":[]}`, 422, "at least one event"},
		{"batch bad time", "POST", "/api/v1/slots/batch", "application/json", `{"configName":"default","events":[{"eventId":"a","requestedTime":"x"}]}`, 422, "events.0.requestedTime"},
		{"batch unknown config", "POST", "/api/v1/slots/batch", "application/json", `{"configName":"nope","events":[` + ev("a") + `]}`, 422, server.TypeUnknownConfig},
		{"malformed duration", "POST", "/admin/rate-limit/config", "application/json", `{"configName":"x","maxPerWindow":1,"windowSize":"4 seconds"}`, 422, "windowSize"},
		{"months", "POST", "/admin/rate-limit/config", "application/json", `{"configName":"x","maxPerWindow":1,"windowSize":"P1M"}`, 422, "no fixed length"},
		{"zero max", "POST", "/admin/rate-limit/config", "application/json", `{"configName":"x","maxPerWindow":0,"windowSize":"PT4S"}`, 422, "maxPerWindow must be from 1"},
		{"fractional max", "POST", "/admin/rate-limit/config", "application/json", `{"configName":"x","maxPerWindow":1.5,"windowSize":"PT4S"}`, 422, "whole number"},
		{"tiny window", "POST", "/admin/rate-limit/config", "application/json", `{"configName":"x","maxPerWindow":1,"windowSize":"PT0.0001S"}`, 422, "windowSize must be from 1ms"},
		{"no slot", "GET", "/api/v1/slots/missing", "", "", 404, server.TypeSlotNotFound},
		{"NUL config name", "POST", "/admin/rate-limit/config", "application/json", `{"configName":"a\u0000b","maxPerWindow":1,"windowSize":"PT4S"}`, 422, "configName contains control character U+0000 at byte 1"},
		{"NUL config in assign", "POST", "/api/v1/slots", "application/json", `{"eventId":"a","configName":"a\u0000b","requestedTime":"2025-06-01T12:00:00Z"}`, 422, "configName contains control character U+0000 at byte 1"},
		{"invalid UTF-8 event id", "GET", "/api/v1/slots/%FF", "", "", 422, `"pointer":"#/path/eventId"`},
		{"invalid UTF-8 config", "GET", "/admin/rate-limit/config/%FF", "", "", 422, "path parameter name is not valid UTF-8"},
		{"deactivate invalid UTF-8 config", "POST", "/admin/rate-limit/config/%FF/deactivate", "", "", 422, "path parameter name is not valid UTF-8"},
		{"wrong method", "DELETE", "/api/v1/slots", "", "", 405, "POST"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := b.do(t, tc.method, tc.path, tc.ct, tc.body)
			require.Equal(t, tc.code, rec.Code, rec.Body.String())
			require.Contains(t, rec.Body.String(), tc.want)
			require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
			if tc.code == http.StatusUnsupportedMediaType {
				require.Equal(t, "application/json", rec.Header().Get("Accept-Post"))
			}
		})
	}
}

// TestSlotVerify: GET /admin/rate-limit/verify answers the counts of the
// records database's slot tables and that no invariant fails.
func TestSlotVerify(t *testing.T) {
	t.Parallel()
	b := fullSetup(t, server.Config{})
	rec := b.do(t, http.MethodPost, "/admin/rate-limit/config", "application/json",
		`{"configName":"v","maxPerWindow":2,"windowSize":"PT1S"}`)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	rec = b.do(t, http.MethodPost, "/api/v1/slots/batch", "application/json",
		`{"configName":"v","events":[{"eventId":"a","requestedTime":"2025-06-01T12:00:00Z"},{"eventId":"b","requestedTime":"2025-06-01T12:00:00Z"},{"eventId":"c","requestedTime":"2025-06-01T12:00:00Z"}]}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	rec = b.do(t, http.MethodGet, "/admin/rate-limit/verify", "", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var out struct {
		OK                      bool
		Configs, Windows, Slots int64
		Problems                []string
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
	require.True(t, out.OK)
	require.Equal(t, int64(1), out.Configs)
	require.Equal(t, int64(2), out.Windows)
	require.Equal(t, int64(3), out.Slots)
	require.NotNil(t, out.Problems)
	require.Empty(t, out.Problems)
}
