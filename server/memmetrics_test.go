package server_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/server"
	"github.com/sluicerl/sluice/slot"
	"github.com/sluicerl/sluice/store/memstore"
)

// TestMemstoreMetrics: a server over an in-memory store exports its size and
// bounds, and counts the takes its byte bound refused (answered 503, never
// by giving an old key's budget away).
func TestMemstoreMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t, server.Config{})
	const keyLen = 400
	maxBytes := int64(4 * (keyLen + memstore.EntryOverhead))
	lim, err := limiter.New(limiter.Config{
		Store:    memstore.New(memstore.Config{Clock: b.clock, Shards: 1, MaxBytes: maxBytes}),
		Clock:    b.clock,
		Policies: testPolicies,
	})
	require.NoError(t, err)
	b = setup(t, server.Config{Limiter: lim})
	refused := 0
	for i := range 10 {
		key := strconv.Itoa(i) + strings.Repeat("k", keyLen-1)
		rec := b.take(t, `{"policy":"strict","key":"`+key+`"}`)
		switch rec.Code {
		case http.StatusOK:
		case http.StatusServiceUnavailable:
			require.Contains(t, rec.Body.String(), "full of keys that still hold state")
			refused++
		default:
			t.Fatalf("take %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	require.Equal(t, 6, refused)
	m := b.metrics(t)
	for _, want := range []string{
		`sluice_memstore_keys 4`,
		`sluice_memstore_bytes ` + strconv.Itoa(4*(keyLen+memstore.EntryOverhead)),
		`sluice_memstore_max_bytes ` + strconv.FormatInt(maxBytes, 10),
		`sluice_memstore_refused_total 6`,
		`sluice_memstore_evicted_total 0`,
	} {
		require.Regexp(t, regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(want)+`$`), m)
	}
}

// TestMemSlotMetrics: a server over an in-memory slot store exports its
// bookings, bytes and bound, and answers a booking past the bound 503
// without forgetting the slots it holds.
func TestMemSlotMetrics(t *testing.T) {
	t.Parallel()
	const idLen = 200
	id := func(i int) string { return strconv.Itoa(i) + strings.Repeat("e", idLen-1) }
	maxBytes := int64(len("c")+memstore.ConfigOverhead) + 2*memstore.WindowOverhead + 3*(idLen+memstore.SlotOverhead)
	sch, err := slot.New(slot.Config{Store: memstore.NewSlotsWith(memstore.SlotsConfig{MaxBytes: maxBytes})})
	require.NoError(t, err)
	b := setup(t, server.Config{Slots: sch})
	rec := b.do(t, http.MethodPost, "/admin/rate-limit/config", "application/json",
		`{"configName":"c","maxPerWindow":100,"windowSize":"PT4S"}`)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	assign := func(i int) *httptest.ResponseRecorder {
		return b.do(t, http.MethodPost, "/api/v1/slots", "application/json",
			`{"eventId":"`+id(i)+`","configName":"c","requestedTime":"2030-01-01T00:00:00Z"}`)
	}
	for i := range 3 {
		rec := assign(i)
		require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	}
	rec = assign(3)
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Contains(t, rec.Body.String(), "full of bookings")
	rec = assign(1)
	require.Equal(t, http.StatusOK, rec.Code, "a booked event keeps its slot: %s", rec.Body)
	m := b.metrics(t)
	for _, want := range []string{
		`sluice_memstore_slot_bookings 3`,
		`sluice_memstore_slot_bytes ` + strconv.FormatInt(maxBytes-memstore.WindowOverhead, 10),
		`sluice_memstore_slot_max_bytes ` + strconv.FormatInt(maxBytes, 10),
		`sluice_memstore_slot_refused_total 1`,
	} {
		require.Regexp(t, regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(want)+`$`), m)
	}
}
