package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/server"
	"github.com/sluicerl/sluice/store/memstore"
)

func jobSetup(t *testing.T) *bundle {
	t.Helper()
	b := setup(t, server.Config{Jobs: memstore.NewJobStore(memstore.JobConfig{})})
	return b
}

func decodeAs[T any](t *testing.T, body []byte) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(body, &v), string(body))
	return v
}

// TestJobWorkerProtocol drives a job through the API the way a worker in
// another language would: upsert, claim, commit, a stale token refused,
// finish, and the records read back.
func TestJobWorkerProtocol(t *testing.T) {
	t.Parallel()
	b := jobSetup(t)
	const js = "application/json"
	rec := b.do(t, "PUT", "/v1/connectors/binance", js, `{"policies":["binance-weight"],"profile":"binance"}`)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	rec = b.do(t, "PUT", "/v1/connectors/binance", js, `{"policies":["binance-weight"],"profile":"binance"}`)
	require.Equal(t, http.StatusOK, rec.Code, "the same connector again is one record")
	rec = b.do(t, "PUT", "/v1/jobs/binance:BTC%2FUSDT:1m:ohlcv", js,
		`{"connector_id":"binance","type":"ohlcv","params":{"symbol":"BTC/USDT"},"interval_ms":60000,"priority":50}`)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	require.Equal(t, "binance:BTC/USDT:1m:ohlcv", decodeAs[map[string]any](t, rec.Body.Bytes())["id"])

	claim := func(holder string) []map[string]any {
		rec := b.do(t, "POST", "/v1/jobs/claim", js, fmt.Sprintf(`{"holder":%q,"limit":5,"lease_ttl_ms":60000}`, holder))
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		return decodeAs[struct {
			Claims []map[string]any `json:"claims"`
		}](t, rec.Body.Bytes()).Claims
	}
	cs := claim("ts-worker-1")
	require.Len(t, cs, 1)
	token := int64(cs[0]["token"].(float64))
	require.Empty(t, claim("ts-worker-2"), "never two holders on one job")

	path := "/v1/jobs/binance:BTC%2FUSDT:1m:ohlcv/"
	rec = b.do(t, "POST", path+"commit", js, fmt.Sprintf(`{"token":%d,"cursor":"1705622400000"}`, token))
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	rec = b.do(t, "POST", path+"heartbeat", js, fmt.Sprintf(`{"token":%d,"lease_ttl_ms":60000}`, token))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	rec = b.do(t, "POST", path+"commit", js, fmt.Sprintf(`{"token":%d,"cursor":"stale"}`, token+1))
	require.Equal(t, http.StatusConflict, rec.Code)
	require.Equal(t, server.TypeStaleToken, decodeAs[map[string]any](t, rec.Body.Bytes())["type"])
	rec = b.do(t, "POST", path+"park", js, fmt.Sprintf(`{"token":%d,"reason":"request_cap","delay_ms":1000}`, token))
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code, "a budget reason is not source pressure")
	rec = b.do(t, "POST", path+"finish", js, fmt.Sprintf(`{"token":%d,"delay_ms":60000,"requests":3}`, token))
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	rec = b.do(t, "POST", path+"finish", js, fmt.Sprintf(`{"token":%d}`, token))
	require.Equal(t, http.StatusConflict, rec.Code, "the run has ended")

	rec = b.do(t, "GET", "/v1/jobs/binance:BTC%2FUSDT:1m:ohlcv", "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	j := decodeAs[map[string]any](t, rec.Body.Bytes())
	require.Equal(t, "1705622400000", j["cursor"])
	require.EqualValues(t, 1, j["runs"])
	rec = b.do(t, "GET", "/v1/runs?job=binance:BTC%2FUSDT:1m:ohlcv", "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	runs := decodeAs[struct {
		Items []map[string]any `json:"items"`
	}](t, rec.Body.Bytes()).Items
	require.Len(t, runs, 1)
	require.Equal(t, "succeeded", runs[0]["outcome"])
	require.EqualValues(t, 1, runs[0]["slices"])
	require.EqualValues(t, 3, runs[0]["requests"])

	// Pause: nothing is claimed, even when triggered; resume: it is.
	require.Equal(t, http.StatusOK, b.do(t, "POST", "/v1/connectors/binance/pause", "", "").Code)
	require.Equal(t, http.StatusOK, b.do(t, "POST", path+"trigger", "", "").Code)
	require.Empty(t, claim("w"))
	require.Equal(t, http.StatusOK, b.do(t, "POST", "/v1/connectors/binance/resume", "", "").Code)
	require.Len(t, claim("w"), 1)

	rec = b.do(t, "GET", "/v1/connectors", "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	conns := decodeAs[struct {
		Items []map[string]any `json:"items"`
	}](t, rec.Body.Bytes()).Items
	require.Len(t, conns, 1)
	require.EqualValues(t, 1, conns[0]["jobs_count"])
	for _, p := range []string{"/v1/gaps", "/v1/breaker-transitions?connector=binance", "/v1/jobs?connector=binance&limit=1"} {
		require.Equal(t, http.StatusOK, b.do(t, "GET", p, "", "").Code, p)
	}
}

func TestJobAPIBadInput(t *testing.T) {
	t.Parallel()
	b := jobSetup(t)
	const js = "application/json"
	for _, tc := range []struct {
		method, path, ct, body string
		code                   int
	}{
		{"PUT", "/v1/connectors/x", js, `{"status":"running"}`, http.StatusUnprocessableEntity},
		{"PUT", "/v1/connectors/x", js, `{"polices":[]}`, http.StatusBadRequest},
		{"PUT", "/v1/connectors/x", "text/plain", `{}`, http.StatusUnsupportedMediaType},
		{"PUT", "/v1/jobs/j", js, `{"connector_id":"nope","type":"t"}`, http.StatusNotFound},
		{"PUT", "/v1/jobs/j", js, `{"connector_id":"x","type":"t","interval_ms":-1}`, http.StatusUnprocessableEntity},
		{"POST", "/v1/jobs/claim", js, `{"holder":"","lease_ttl_ms":1000}`, http.StatusUnprocessableEntity},
		{"POST", "/v1/jobs/claim", js, `{"holder":"w","lease_ttl_ms":9223372036854775807}`, http.StatusUnprocessableEntity},
		{"POST", "/v1/jobs/claim", js, `{"holder":"w","limit":100000,"lease_ttl_ms":1000}`, http.StatusUnprocessableEntity},
		{"POST", "/v1/jobs/j/commit", js, `{"token":1}`, http.StatusNotFound},
		{"POST", "/v1/jobs/j/explode", js, `{}`, http.StatusNotFound},
		{"GET", "/v1/jobs/nope", "", ``, http.StatusNotFound},
		{"GET", "/v1/runs?limit=0", "", ``, http.StatusUnprocessableEntity},
		{"GET", "/v1/runs?after=abc", "", ``, http.StatusUnprocessableEntity},
	} {
		rec := b.do(t, tc.method, tc.path, tc.ct, tc.body)
		require.Equal(t, tc.code, rec.Code, "%s %s %s: %s", tc.method, tc.path, tc.body, rec.Body.String())
	}
}

// TestJobCronOverHTTP: a job's cron schedule and time zone go in and come
// back out; a bad one is a 422 naming the job and the expression.
func TestJobCronOverHTTP(t *testing.T) {
	t.Parallel()
	b := jobSetup(t)
	const js = "application/json"
	require.Equal(t, http.StatusCreated, b.do(t, "PUT", "/v1/connectors/shop", js, `{}`).Code)
	rec := b.do(t, "PUT", "/v1/jobs/shop:orders", js, `{"connector_id":"shop","type":"orders","cron":"*/15 * * * *","time_zone":"America/New_York"}`)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	j := decodeAs[map[string]any](t, rec.Body.Bytes())
	require.Equal(t, "*/15 * * * *", j["cron"])
	require.Equal(t, "America/New_York", j["time_zone"])
	require.EqualValues(t, 0, j["interval_ms"])
	rec = b.do(t, "GET", "/v1/jobs?connector=shop", "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), `"cron":"*/15 * * * *"`)
	for _, tc := range []struct{ body, want string }{
		{`{"connector_id":"shop","type":"orders","cron":"*/15 * * *"}`, `job \"shop:orders\": store: invalid job record: cron \"*/15 * * *\"`},
		{`{"connector_id":"shop","type":"orders","cron":"@hourly","interval_ms":1000}`, "not both"},
		{`{"connector_id":"shop","type":"orders","cron":"@hourly","time_zone":"Mars/Base"}`, `time_zone \"Mars/Base\"`},
		{`{"connector_id":"shop","type":"orders","cron":7}`, "cron"},
	} {
		rec := b.do(t, "PUT", "/v1/jobs/shop:orders", js, tc.body)
		require.Contains(t, []int{http.StatusUnprocessableEntity, http.StatusBadRequest}, rec.Code, tc.body)
		require.Contains(t, rec.Body.String(), tc.want, tc.body)
	}
}

// TestJobGroupWeightsOverHTTP: a fairness group's weight is set and read
// over HTTP; a bad weight is a 422 naming the field.
func TestJobGroupWeightsOverHTTP(t *testing.T) {
	t.Parallel()
	b := jobSetup(t)
	const js = "application/json"
	require.Equal(t, http.StatusCreated, b.do(t, "PUT", "/v1/connectors/shopify", js, `{}`).Code)
	rec := b.do(t, "PUT", "/v1/jobs/shopify:orders:a", js, `{"connector_id":"shopify","type":"orders","group_key":"shop-a"}`)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	rec = b.do(t, "GET", "/v1/job-groups", "", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.JSONEq(t, `{"items":[{"group":"shop-a","weight":1}]}`, rec.Body.String())
	rec = b.do(t, "PUT", "/v1/job-groups/shop-a", js, `{"weight":3}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.JSONEq(t, `{"group":"shop-a","weight":3}`, rec.Body.String())
	rec = b.do(t, "PUT", "/v1/job-groups/shop-b", js, `{"weight":1000}`)
	require.Equal(t, http.StatusOK, rec.Code, "a group without jobs yet")
	rec = b.do(t, "GET", "/v1/job-groups/shop-a", "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	require.JSONEq(t, `{"group":"shop-a","weight":3}`, rec.Body.String())
	rec = b.do(t, "GET", "/v1/job-groups/never-set", "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	require.JSONEq(t, `{"group":"never-set","weight":1}`, rec.Body.String())
	rec = b.do(t, "GET", "/v1/job-groups?limit=1", "", "")
	require.JSONEq(t, `{"items":[{"group":"shop-a","weight":3}],"next":"shop-a"}`, rec.Body.String())
	rec = b.do(t, "GET", "/v1/job-groups?after=shop-a", "", "")
	require.JSONEq(t, `{"items":[{"group":"shop-b","weight":1000}]}`, rec.Body.String())

	for _, body := range []string{`{"weight":0}`, `{"weight":-2}`, `{"weight":1001}`, `{"weight":1e30}`, `{"weight":1.5}`,
		`{"weight":"3"}`, `{"weight":true}`, `{"weight":null}`, `{}`, `{"weight":[3]}`} {
		rec := b.do(t, "PUT", "/v1/job-groups/shop-a", js, body)
		require.Equal(t, http.StatusUnprocessableEntity, rec.Code, body)
		require.Contains(t, rec.Body.String(), "weight must be an integer from 1 to 1000", body)
	}
	rec = b.do(t, "PUT", "/v1/job-groups/shop-a", js, `{"wieght":3}`)
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Contains(t, rec.Body.String(), "wieght")
	rec = b.do(t, "PUT", "/v1/job-groups/a%01b", js, `{"weight":3}`)
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code)
	require.Contains(t, rec.Body.String(), "group key")
	require.Equal(t, http.StatusUnprocessableEntity, b.do(t, "GET", "/v1/job-groups/a%01b", "", "").Code)
	rec = b.do(t, "GET", "/v1/job-groups/shop-a", "", "")
	require.JSONEq(t, `{"group":"shop-a","weight":3}`, rec.Body.String(), "no bad weight was written")
}

// TestJobClaimGatedByConnectorPolicies: the worker protocol's claim asks
// the connector's policies in the server's limiter first: a connector whose
// policy is exhausted has its due jobs moved to when capacity returns
// instead of claimed; then they are claimed. A policy the limiter does not
// hold gates nothing.
func TestJobClaimGatedByConnectorPolicies(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(start)
	lim, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{Clock: clk}), Clock: clk, Policies: testPolicies})
	require.NoError(t, err)
	b := setup(t, server.Config{Limiter: lim, Jobs: memstore.NewJobStore(memstore.JobConfig{Clock: clk})})
	const js = "application/json"
	require.Equal(t, http.StatusCreated, b.do(t, "PUT", "/v1/connectors/shop", js, `{"policies":["strict"]}`).Code)
	require.Equal(t, http.StatusCreated, b.do(t, "PUT", "/v1/connectors/other", js, `{"policies":["not-a-policy"]}`).Code)
	for _, id := range []string{"shop:a", "shop:b"} {
		rec := b.do(t, "PUT", "/v1/jobs/"+id, js, `{"connector_id":"shop","type":"t","interval_ms":60000}`)
		require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	}
	rec := b.do(t, "PUT", "/v1/jobs/other:a", js, `{"connector_id":"other","type":"t","interval_ms":60000}`)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	// The connector's one unit a minute is spent (the key is its id).
	require.Equal(t, http.StatusOK, b.take(t, `{"policy":"strict","key":"shop"}`).Code)

	claim := func() []string {
		rec := b.do(t, "POST", "/v1/jobs/claim", js, `{"holder":"w","limit":10,"lease_ttl_ms":600000}`)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		var ids []string
		for _, c := range decodeAs[struct {
			Claims []struct {
				Job struct{ ID string } `json:"job"`
			} `json:"claims"`
		}](t, rec.Body.Bytes()).Claims {
			ids = append(ids, c.Job.ID)
		}
		return ids
	}
	require.Equal(t, []string{"other:a"}, claim(), "shop has no capacity; an unknown policy gates nothing")
	for _, id := range []string{"shop:a", "shop:b"} {
		rec := b.do(t, "GET", "/v1/jobs/"+id, "", "")
		require.Equal(t, http.StatusOK, rec.Code)
		j := decodeAs[struct {
			NextRunAt time.Time `json:"next_run_at"`
			Runs      int64     `json:"runs"`
		}](t, rec.Body.Bytes())
		require.Equal(t, start.Add(time.Minute).UTC(), j.NextRunAt.UTC(), "%s moved to when capacity returns", id)
		require.Zero(t, j.Runs, id)
	}
	require.Empty(t, claim(), "not due before then")
	clk.Advance(time.Minute)
	got := claim()
	require.ElementsMatch(t, []string{"shop:a", "shop:b"}, got, "claimed once capacity is back")
}

// TestJobFinishBySchedule: a worker in another language finishes a cron
// job with "schedule": true, and the server makes it due at the job's next
// cron time (plus jitter short of the one after), on its clock.
func TestJobFinishBySchedule(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.Date(2026, 1, 19, 10, 7, 30, 0, time.UTC))
	b := setup(t, server.Config{Clock: clk, Jobs: memstore.NewJobStore(memstore.JobConfig{Clock: clk})})
	const js = "application/json"
	require.Equal(t, http.StatusCreated, b.do(t, "PUT", "/v1/connectors/shop", js, `{}`).Code)
	rec := b.do(t, "PUT", "/v1/jobs/shop:orders", js, `{"connector_id":"shop","type":"orders","cron":"*/15 * * * *"}`)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	rec = b.do(t, "POST", "/v1/jobs/claim", js, `{"holder":"ts","lease_ttl_ms":60000}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	claims := decodeAs[struct {
		Claims []struct {
			Token int64 `json:"token"`
			Job   struct {
				Cron string `json:"cron"`
			} `json:"job"`
		} `json:"claims"`
	}](t, rec.Body.Bytes()).Claims
	require.Len(t, claims, 1)
	require.Equal(t, "*/15 * * * *", claims[0].Job.Cron, "the claim tells the worker its schedule")
	tok := claims[0].Token
	rec = b.do(t, "POST", "/v1/jobs/shop:orders/finish", js, fmt.Sprintf(`{"token":%d,"schedule":true,"delay_ms":1000}`, tok))
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code)
	require.Contains(t, rec.Body.String(), "delay_ms or schedule")
	rec = b.do(t, "POST", "/v1/jobs/shop:orders/finish", js, fmt.Sprintf(`{"token":%d,"schedule":true}`, tok))
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	rec = b.do(t, "GET", "/v1/jobs/shop:orders", "", "")
	next := decodeAs[struct {
		NextRunAt time.Time `json:"next_run_at"`
	}](t, rec.Body.Bytes()).NextRunAt
	slot := time.Date(2026, 1, 19, 10, 15, 0, 0, time.UTC)
	require.False(t, next.Before(slot), "next %s before the cron time %s", next, slot)
	require.True(t, next.Before(slot.Add(15*time.Minute)), "next %s not short of the following cron time", next)
	rec = b.do(t, "POST", "/v1/jobs/shop:orders/finish", js, fmt.Sprintf(`{"token":%d,"schedule":true}`, tok))
	require.Equal(t, http.StatusConflict, rec.Code, "the run has ended")
}
