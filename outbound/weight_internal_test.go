package outbound

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/signal"
)

func weightReport(status, used int, window string) *signal.Report {
	h := http.Header{}
	h.Set("X-Mbx-Used-Weight-"+window, strconv.Itoa(used))
	if status == http.StatusTooManyRequests || status == http.StatusTeapot {
		h.Set("Retry-After", "1")
	}
	rep := signal.Parse(0, signal.Response{Status: status, Header: h})
	return &rep
}

func TestUsedWeightLearnsTheBudget(t *testing.T) {
	t.Parallel()
	var w usedWeight
	// Calls of weight 2, two processes interleaved: this one sees every
	// other report and some in a row.
	for _, used := range []int{2, 6, 10, 12, 16, 20, 24} {
		require.Zero(t, w.observe(weightReport(200, used, "1s")), "no budget before a refusal")
	}
	require.Equal(t, int64(2), w.unit, "a call's weight is the smallest step")
	// Refused at 100 used: the budget is 100 a second, 50 calls.
	require.InDelta(t, weightMargin*50, w.observe(weightReport(429, 100, "1s")), 1e-9)
	// A ban's report (usage 0) changes nothing; a success above the
	// budget raises it (the limit went up).
	require.InDelta(t, weightMargin*50, w.observe(weightReport(418, 0, "1s")), 1e-9)
	require.InDelta(t, weightMargin*51, w.observe(weightReport(200, 102, "1s")), 1e-9)
	// The limit halves: refused at 50.
	require.InDelta(t, weightMargin*25, w.observe(weightReport(429, 50, "1s")), 1e-9)
	// The window's length comes from the header: a minute's 1200 weight
	// is 10 calls of 2 a second.
	var m usedWeight
	m.observe(weightReport(200, 4, "1m"))
	m.observe(weightReport(200, 6, "1m"))
	require.InDelta(t, weightMargin*10, m.observe(weightReport(429, 1200, "1m")), 1e-9)
	// Other reports keep what was learned.
	rep := signal.Parse(0, signal.Response{Status: 200})
	require.InDelta(t, weightMargin*10, m.observe(&rep), 1e-9)
}

// TestUsedWeightIgnoresForeignRefusals: a 429 while the window holds a
// fraction of what it has held before was another limit's refusal, and
// must not set the budget to that fraction for good.
func TestUsedWeightIgnoresForeignRefusals(t *testing.T) {
	t.Parallel()
	var w usedWeight
	for _, used := range []int{2, 4, 6, 8, 100} {
		w.observe(weightReport(200, used, "1s"))
	}
	require.InDelta(t, weightMargin*60, w.observe(weightReport(429, 120, "1s")), 1e-9)
	// Early in a new window (2 used), a refusal from another limit.
	require.InDelta(t, weightMargin*60, w.observe(weightReport(429, 2, "1s")), 1e-9,
		"a refusal at 2 of a window that has held 120 is not this window's budget")
	// A refusal near what the window holds is: the limit went down.
	require.InDelta(t, weightMargin*40, w.observe(weightReport(429, 80, "1s")), 1e-9)
}

// TestUsedWeightIgnoresGarbageWindows: an interval outside a second to a
// day, or a usage beyond any real one, is not a window to pace by.
func TestUsedWeightIgnoresGarbageWindows(t *testing.T) {
	t.Parallel()
	for _, window := range []string{"99999d", "2d", "9999h"} {
		var w usedWeight
		w.observe(weightReport(200, 2, window))
		w.observe(weightReport(200, 4, window))
		require.Zero(t, w.observe(weightReport(429, 100, window)), window)
		require.Zero(t, w.window, window)
	}
	var w usedWeight
	w.observe(weightReport(200, 2, "1s"))
	w.observe(weightReport(200, 4, "1s"))
	require.Zero(t, w.observe(weightReport(429, 1<<50, "1s")), "a usage of 2^50")
	require.InDelta(t, weightMargin*50, w.observe(weightReport(429, 100, "1s")), 1e-9)
}
