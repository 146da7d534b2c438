package provider_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/job"
	"github.com/sluicerl/sluice/provider"
	"github.com/sluicerl/sluice/signal"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// TestJobParksOnThrottle: a job handler that reserves through a Runtime
// and finds the shop's bucket short parks its job until the bucket can
// hold the query (seed 004: delayed, not failed: no attempt burned), and
// runs it then. The job's group key is the shop's normalized id.
func TestJobParksOnThrottle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, 1, 6, 12, 0, 0, 0, time.UTC)
	clk := clocktest.New(t0)
	set, err := provider.Embedded()
	require.NoError(t, err)
	p, _ := set.Get("shopify-graphql")
	rt, err := provider.NewRuntime(provider.Config{Profile: p, Store: memstore.New(memstore.Config{Clock: clk}), Clock: clk})
	require.NoError(t, err)
	group, err := provider.GroupKey(p, "https://Shop-A.myshopify.com/admin")
	require.NoError(t, err)

	js := memstore.NewJobStore(memstore.JobConfig{Clock: clk})
	_, _, err = js.UpsertConnector(ctx, store.Connector{ID: "shopify"})
	require.NoError(t, err)
	_, _, err = js.UpsertJob(ctx, store.JobSpec{ID: "sync-products", ConnectorID: "shopify", Type: "sync", GroupKey: group}, clk.Now())
	require.NoError(t, err)

	// Another app spent the shop's bucket: 100 points left at 50/s.
	tk, err := rt.Reserve(ctx, provider.Call{Key: group, Cost: 500})
	require.NoError(t, err)
	_, err = rt.Settle(ctx, tk, signal.Response{Status: 200, Body: []byte(`{"errors":[{"extensions":{"code":"THROTTLED"}}],"extensions":{"cost":{"requestedQueryCost":500,"throttleStatus":{"maximumAvailable":1000,"currentlyAvailable":100,"restoreRate":50}}}}`)})
	require.NoError(t, err)

	ran := 0
	var events []job.Event
	w, err := job.New(job.Config{Store: js, Clock: clk, PassNow: true, Rand: func() float64 { return 0.5 },
		OnEvent: func(e job.Event) { events = append(events, e) },
		Handlers: map[string]job.Handler{"sync": func(ctx context.Context, run *job.Run) error {
			tk, err := rt.Reserve(ctx, provider.Call{Key: run.Job().GroupKey, Cost: 300})
			if err != nil {
				return err
			}
			if !tk.OK {
				reason, wait := tk.Pressure()
				return job.Pressure(reason, wait, nil)
			}
			ran++
			_, err = rt.Settle(ctx, tk, signal.Response{Status: 200, Body: []byte(`{"data":{},"extensions":{"cost":{"requestedQueryCost":300,"actualQueryCost":120,"throttleStatus":{"maximumAvailable":1000,"currentlyAvailable":700,"restoreRate":50}}}}`)})
			return err
		}}})
	require.NoError(t, err)
	n, err := w.Poll(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Zero(t, ran, "the query was not sent")
	j, err := js.GetJob(ctx, "sync-products")
	require.NoError(t, err)
	require.Zero(t, j.Failures, "parked, not failed")
	require.Equal(t, t0.Add(4*time.Second), j.NextRunAt, "(300 - 100) / 50 s")
	var park *job.Event
	for i := range events {
		if events[i].Kind == job.EventPark {
			park = &events[i]
		}
	}
	require.NotNil(t, park)
	require.Equal(t, store.PressureNoCapacity, park.Reason)
	require.Equal(t, group, park.Group)

	clk.Advance(4 * time.Second)
	n, err = w.Poll(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, ran)
}
