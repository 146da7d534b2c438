package server_test

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/server"
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
