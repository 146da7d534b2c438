package sim

import (
	"encoding/json"
	"time"
)

// The JSON forms of Scenario, ProviderConfig and Change write durations as
// Go duration strings ("1.5s"), as scenario files spell them, not as
// nanosecond integers: a run's JSON report is readable, and its scenario
// is a valid --scenario file (JSON is YAML) that ParseScenario reads back.

// MarshalJSON writes the scenario with readable durations.
func (s Scenario) MarshalJSON() ([]byte, error) {
	type plain Scenario
	return json.Marshal(struct {
		plain
		Duration  string `json:"duration"`
		SlowAfter string `json:"slow_after"`
	}{plain(s), s.Duration.String(), s.SlowAfter.String()})
}

// MarshalJSON writes the provider config with readable durations.
func (c ProviderConfig) MarshalJSON() ([]byte, error) {
	type plain ProviderConfig
	return json.Marshal(struct {
		plain
		Burst     string `json:"burst,omitempty"`
		Latency   string `json:"latency,omitempty"`
		Jitter    string `json:"jitter,omitempty"`
		BanWindow string `json:"ban_window,omitempty"`
		BanFor    string `json:"ban_for,omitempty"`
		Window    string `json:"window,omitempty"`
	}{plain(c), durationOrEmpty(c.Burst), durationOrEmpty(c.Latency), durationOrEmpty(c.Jitter), durationOrEmpty(c.BanWindow),
		durationOrEmpty(c.BanFor), durationOrEmpty(c.Window)})
}

// MarshalJSON writes the change with a readable At.
func (c Change) MarshalJSON() ([]byte, error) {
	type plain Change
	return json.Marshal(struct {
		plain
		At string `json:"at"`
	}{plain(c), c.At.String()})
}

// durationOrEmpty is d as a string, or "" (omitted) for zero, as the
// omitempty integers were.
func durationOrEmpty(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}
