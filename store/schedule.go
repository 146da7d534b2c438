package store

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Cron schedules. A job's schedule is an interval (JobSpec.Interval) or a
// cron expression (JobSpec.Cron) in a time zone (JobSpec.TimeZone, an
// IANA name; empty means UTC). The expression is standard five-field cron
// (minute, hour, day of month, month, day of week) or a descriptor:
// @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly.

// MaxCronLen bounds a cron expression and a time zone name, in bytes.
const MaxCronLen = 256

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// CronSchedule is a parsed cron schedule: a plain value, safe for
// concurrent use. The zero value is not usable; build it with ParseCron.
type CronSchedule struct {
	sched cron.Schedule
	loc   *time.Location
}

// ParseCron parses a cron expression in a time zone (an IANA name such as
// "Europe/Paris"; empty means UTC). The error matches ErrInvalidJob and
// says what was wrong; an expression that never fires (February 30) is an
// error too.
func ParseCron(expr, zone string) (CronSchedule, error) {
	if len(zone) > MaxCronLen || !validText(zone) {
		return CronSchedule{}, fmt.Errorf("%w: time_zone must be an IANA name of at most %d bytes", ErrInvalidJob, MaxCronLen)
	}
	loc := time.UTC
	switch zone {
	case "", "UTC":
	case "Local":
		return CronSchedule{}, fmt.Errorf("%w: time_zone %q: name the zone (such as Europe/Paris); Local differs from machine to machine", ErrInvalidJob, zone)
	default:
		l, err := time.LoadLocation(zone)
		if err != nil {
			return CronSchedule{}, fmt.Errorf("%w: time_zone %q is not a known IANA time zone", ErrInvalidJob, zone)
		}
		loc = l
	}
	if len(expr) > MaxCronLen || !validText(expr) || strings.TrimSpace(expr) == "" {
		return CronSchedule{}, fmt.Errorf("%w: cron %q: want five fields (minute hour day-of-month month day-of-week) or a descriptor such as @hourly, at most %d bytes",
			ErrInvalidJob, cut(expr), MaxCronLen)
	}
	f := strings.Fields(expr)
	if strings.HasPrefix(f[0], "TZ=") || strings.HasPrefix(f[0], "CRON_TZ=") {
		return CronSchedule{}, fmt.Errorf("%w: cron %q: give the time zone as time_zone, not in the expression", ErrInvalidJob, cut(expr))
	}
	if strings.HasPrefix(f[0], "@every") {
		return CronSchedule{}, fmt.Errorf("%w: cron %q: @every is an interval; give it as the interval", ErrInvalidJob, cut(expr))
	}
	sched, err := parseCron(expr)
	if err != nil {
		return CronSchedule{}, fmt.Errorf("%w: cron %q: %v", ErrInvalidJob, cut(expr), err)
	}
	s := CronSchedule{sched: sched, loc: loc}
	if s.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return CronSchedule{}, fmt.Errorf("%w: cron %q never fires", ErrInvalidJob, cut(expr))
	}
	return s, nil
}

// parseCron parses with the library, turning a panic into an error.
func parseCron(expr string) (s cron.Schedule, err error) {
	defer func() {
		if v := recover(); v != nil {
			s, err = nil, fmt.Errorf("unparsable (%v)", v)
		}
	}()
	return cronParser.Parse(expr)
}

// cut shortens a caller's text for an error message.
func cut(s string) string {
	if len(s) <= 64 {
		return s
	}
	i := 64
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i] + "..."
}

// Next returns the first time of the schedule strictly after t, in UTC,
// or the zero time if there is none within five years.
func (s CronSchedule) Next(t time.Time) time.Time {
	n := s.sched.Next(t.In(s.loc))
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// checkSchedule validates a spec's schedule: an interval or a cron
// expression, not both.
func (s *JobSpec) checkSchedule() error {
	if s.Interval < 0 || s.Interval > MaxJobInterval || s.Interval%time.Microsecond != 0 {
		return fmt.Errorf("%w: job %q: interval must be whole microseconds from 0 to %s, got %s", ErrInvalidJob, s.ID, MaxJobInterval, s.Interval)
	}
	if s.Cron == "" {
		if s.TimeZone != "" {
			return fmt.Errorf("%w: job %q: time_zone %q needs a cron schedule", ErrInvalidJob, s.ID, cut(s.TimeZone))
		}
		return nil
	}
	if s.Interval != 0 {
		return fmt.Errorf("%w: job %q: give an interval or a cron schedule, not both", ErrInvalidJob, s.ID)
	}
	if _, err := ParseCron(s.Cron, s.TimeZone); err != nil {
		return fmt.Errorf("job %q: %w", s.ID, err)
	}
	return nil
}

// ScheduleDelay is how long after now a job that just succeeded is due
// again, by its schedule. For an interval: the interval plus up to jitter
// times it (jitter is u*frac, u uniform in [0, 1)). For a cron schedule:
// until its next time after now, plus up to frac times the gap to the
// time after that, always short of that following time, so a jittered run
// never skips a slot. Without a schedule: MaxJobInterval (the job runs
// again when triggered). The result is in whole microseconds, at most
// MaxJobInterval; now should be in whole microseconds, as a store's
// clock is, so that now plus the delay is exactly the cron time.
func ScheduleDelay(s *JobSpec, now time.Time, u, frac float64) (time.Duration, error) {
	if frac < 0 || u < 0 {
		frac = 0
	}
	if s.Cron == "" {
		if s.Interval <= 0 {
			return MaxJobInterval, nil
		}
		d := s.Interval + time.Duration(u*frac*float64(s.Interval))
		return min(d.Truncate(time.Microsecond), MaxJobInterval), nil
	}
	sched, err := ParseCron(s.Cron, s.TimeZone)
	if err != nil {
		return 0, fmt.Errorf("job %q: %w", s.ID, err)
	}
	next := sched.Next(now)
	if next.IsZero() {
		return MaxJobInterval, nil
	}
	d := next.Sub(now)
	if following := sched.Next(next); !following.IsZero() && frac > 0 {
		gap := following.Sub(next)
		j := min(time.Duration(u*frac*float64(gap)), gap-time.Microsecond)
		d += max(j, 0)
	}
	return min(max(d.Truncate(time.Microsecond), time.Microsecond), MaxJobInterval), nil
}
