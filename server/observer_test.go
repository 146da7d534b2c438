package server_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/server"
	"github.com/sluicerl/sluice/slot"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// recordingObserver keeps what a server.Observer is told.
type recordingObserver struct {
	mu        sync.Mutex
	decisions []string // policy/key/allowed|denied|shadow
	leases    []string // policy/key/acquired|refused
	configs   []string
}

func (o *recordingObserver) ObserveDecision(key string, d limiter.Decision, granted bool) {
	res := "allowed"
	switch {
	case d.Shadowed:
		res = "shadow"
	case !granted || !d.Allowed:
		res = "denied"
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.decisions = append(o.decisions, d.Policy+"/"+key+"/"+res)
}

func (o *recordingObserver) ObserveLease(policy, key, holder string, acquired bool) {
	res := "refused"
	if acquired {
		res = "acquired"
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.leases = append(o.leases, policy+"/"+key+"/"+holder+"/"+res)
}

func (o *recordingObserver) ObserveSlotConfig(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.configs = append(o.configs, name)
}

// TestObserverSeesWhatIsCounted: the observer sees each decision the
// metrics count, with its key (an item of a refused all-or-nothing take as
// denied), never a refused request's; lease acquires that reached the
// store; and the slot configs served.
func TestObserverSeesWhatIsCounted(t *testing.T) {
	t.Parallel()
	obs := &recordingObserver{}
	lim, err := limiter.New(limiter.Config{
		Store: memstore.New(memstore.Config{}),
		Policies: append(append([]limiter.Policy(nil), testPolicies...),
			limiter.Policy{Name: "bulk", Algorithm: store.Concurrency, Permits: 1, TTL: time.Minute}),
	})
	require.NoError(t, err)
	sch, err := slot.New(slot.Config{})
	require.NoError(t, err)
	b := setup(t, server.Config{Limiter: lim, Slots: sch, Observer: obs})

	require.Equal(t, http.StatusOK, b.take(t, `{"policy":"strict","key":"k1"}`).Code)
	require.Equal(t, http.StatusTooManyRequests, b.take(t, `{"policy":"strict","key":"k1"}`).Code)
	require.Equal(t, http.StatusOK, b.take(t, `{"policy":"trial","key":"k2"}`).Code)
	require.Equal(t, http.StatusOK, b.take(t, `{"policy":"trial","key":"k2"}`).Code) // shadowed
	// All or nothing: strict/k1 refuses, so api/k3 counts as denied too.
	require.Equal(t, http.StatusTooManyRequests, b.take(t, `{"items":[{"policy":"api","key":"k3"},{"policy":"strict","key":"k1"}]}`).Code)
	// Refused before the store: not a decision.
	require.Equal(t, http.StatusUnprocessableEntity, b.take(t, `{"policy":"nope","key":"k4"}`).Code)

	require.Equal(t, http.StatusCreated, b.do(t, "POST", "/v1/leases", "application/json", `{"policy":"bulk","key":"L","holder":"a"}`).Code)
	require.Equal(t, http.StatusConflict, b.do(t, "POST", "/v1/leases", "application/json", `{"policy":"bulk","key":"L","holder":"b"}`).Code)
	require.Equal(t, http.StatusUnprocessableEntity, b.do(t, "POST", "/v1/leases", "application/json", `{"policy":"api","key":"L"}`).Code)

	require.Equal(t, http.StatusCreated, b.do(t, "POST", "/admin/rate-limit/config", "application/json",
		`{"configName":"payouts","maxPerWindow":2,"windowSize":"PT1M"}`).Code)
	require.Equal(t, http.StatusCreated, b.do(t, "POST", "/api/v1/slots", "application/json",
		`{"eventId":"e1","configName":"payouts","requestedTime":"2030-01-01T00:00:00Z"}`).Code)

	obs.mu.Lock()
	defer obs.mu.Unlock()
	require.Equal(t, []string{"strict/k1/allowed", "strict/k1/denied", "trial/k2/allowed", "trial/k2/shadow",
		"api/k3/denied", "strict/k1/denied"}, obs.decisions)
	require.Equal(t, []string{"bulk/L/a/acquired", "bulk/L/b/refused"}, obs.leases)
	require.Equal(t, []string{"payouts", "payouts"}, obs.configs)
}
