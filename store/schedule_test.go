package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
)

func TestParseCronRefusesBadInputByName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ expr, zone, want string }{
		{"", "", "want five fields"},
		{"   ", "", "want five fields"},
		{"* * * *", "", `cron "* * * *"`},
		{"61 * * * *", "", "61"},
		{"* * * * * *", "", `cron "* * * * * *"`},
		{"*/0 * * * *", "", `cron "*/0 * * * *"`},
		{"@fortnightly", "", "@fortnightly"},
		{"@every 5m", "", "give it as the interval"},
		{"TZ=Europe/Paris 0 9 * * *", "", "give the time zone as time_zone"},
		{"CRON_TZ=UTC 0 9 * * *", "", "give the time zone as time_zone"},
		{"0 0 30 2 *", "", "never fires"},
		{"0 9 * * *", "Mars/Olympus", `time_zone "Mars/Olympus"`},
		{"0 9 * * *", "Local", `time_zone "Local"`},
		{"0 9 * * *", "../../etc/passwd", "time_zone"},
		{"0 9 * * *\x00", "", "want five fields"},
	} {
		_, err := store.ParseCron(tc.expr, tc.zone)
		require.ErrorIs(t, err, store.ErrInvalidJob, "%q %q", tc.expr, tc.zone)
		require.ErrorContains(t, err, tc.want, "%q %q", tc.expr, tc.zone)
	}
}

func TestJobSpecScheduleChecked(t *testing.T) {
	t.Parallel()
	base := store.JobSpec{ID: "binance:BTC/USDT:1h:ohlcv", ConnectorID: "binance", Type: "ohlcv"}
	for _, tc := range []struct {
		name string
		edit func(*store.JobSpec)
		want string
	}{
		{"both", func(s *store.JobSpec) { s.Cron, s.Interval = "@hourly", time.Hour }, "interval or a cron schedule, not both"},
		{"zone without cron", func(s *store.JobSpec) { s.TimeZone = "UTC" }, "needs a cron schedule"},
		{"bad cron", func(s *store.JobSpec) { s.Cron = "5 * * *" }, `job "binance:BTC/USDT:1h:ohlcv": store: invalid job record: cron "5 * * *"`},
	} {
		s := base
		tc.edit(&s)
		err := s.Check()
		require.ErrorIs(t, err, store.ErrInvalidJob, tc.name)
		require.ErrorContains(t, err, tc.want, tc.name)
	}
	for _, ok := range []store.JobSpec{
		{Cron: "*/15 * * * *"}, {Cron: "@hourly"}, {Cron: "@daily", TimeZone: "Europe/Paris"}, {Cron: "0 9 * * MON-FRI", TimeZone: "UTC"},
	} {
		s := base
		s.Cron, s.TimeZone = ok.Cron, ok.TimeZone
		require.NoError(t, s.Check(), "%q %q", ok.Cron, ok.TimeZone)
	}
}

func TestScheduleDelay(t *testing.T) {
	t.Parallel()
	utc := func(s string) time.Time {
		x, err := time.Parse(time.DateTime, s)
		require.NoError(t, err)
		return x
	}
	for _, tc := range []struct {
		name    string
		spec    store.JobSpec
		now     string
		u, frac float64
		want    string // now + delay
	}{
		{"every 15 minutes", store.JobSpec{Cron: "*/15 * * * *"}, "2026-01-19 10:07:30", 0, 0.1, "2026-01-19 10:15:00"},
		{"on a cron time: the next one", store.JobSpec{Cron: "*/15 * * * *"}, "2026-01-19 10:15:00", 0, 0.1, "2026-01-19 10:30:00"},
		{"jitter is a share of the gap", store.JobSpec{Cron: "*/15 * * * *"}, "2026-01-19 10:07:30", 0.5, 0.1, "2026-01-19 10:15:45"},
		{"jitter stays short of the next slot", store.JobSpec{Cron: "*/15 * * * *"}, "2026-01-19 10:07:30", 0.999, 5, "2026-01-19 10:29:59.999999"},
		{"descriptor", store.JobSpec{Cron: "@hourly"}, "2026-01-19 10:07:30", 0, 0.1, "2026-01-19 11:00:00"},
		{"time zone, winter", store.JobSpec{Cron: "0 9 * * *", TimeZone: "Europe/Paris"}, "2026-01-19 10:00:00", 0, 0, "2026-01-20 08:00:00"},
		{"time zone, summer", store.JobSpec{Cron: "0 9 * * *", TimeZone: "Europe/Paris"}, "2026-07-01 06:00:00", 0, 0, "2026-07-01 07:00:00"},
		{"weekdays", store.JobSpec{Cron: "0 9 * * MON-FRI"}, "2026-01-23 10:00:00", 0, 0, "2026-01-26 09:00:00"}, // Friday -> Monday
		{"interval with jitter", store.JobSpec{Interval: time.Minute}, "2026-01-19 10:07:30", 0.5, 0.1, "2026-01-19 10:08:33"},
		{"no schedule", store.JobSpec{}, "2026-01-19 10:07:30", 0.5, 0.1, ""},
	} {
		now := utc(tc.now)
		d, err := store.ScheduleDelay(&tc.spec, now, tc.u, tc.frac)
		require.NoError(t, err, tc.name)
		if tc.want == "" {
			require.Equal(t, store.MaxJobInterval, d, tc.name)
			continue
		}
		require.Equal(t, utc(tc.want), now.Add(d), tc.name)
	}
	_, err := store.ScheduleDelay(&store.JobSpec{ID: "j", Cron: "nope"}, utc("2026-01-19 10:07:30"), 0, 0)
	require.ErrorIs(t, err, store.ErrInvalidJob)
}

func FuzzParseCron(f *testing.F) {
	for _, s := range []string{"*/15 * * * *", "@hourly", "0 9 * * MON-FRI", "1-5/2 * ? * *", "0 0 30 2 *", "*/0 * * * *", "5-1 * * * *"} {
		f.Add(s, "")
	}
	f.Add("0 9 * * *", "Europe/Paris")
	f.Fuzz(func(t *testing.T, expr, zone string) {
		s, err := store.ParseCron(expr, zone)
		if err != nil {
			require.ErrorIs(t, err, store.ErrInvalidJob)
			return
		}
		now := time.Date(2026, 1, 19, 10, 7, 30, 0, time.UTC)
		next := s.Next(now)
		require.True(t, next.After(now), "%q: next %s not after %s", expr, next, now)
	})
}
