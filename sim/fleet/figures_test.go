package fleet_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicerl/sluice/sim"
	"github.com/sluicerl/sluice/sim/fleet"
)

// TestFigures prints issue 18's table on the manual clock (virtual time:
// the provider sees each request when its client sent it, however loaded
// the machine): every dialect, Sluice sharing one store next to a fixed
// pace at 0.9x the starting limit. It runs only with
// SLUICE_SIM_FIGURES=DURATION (e.g. 60s), optionally SLUICE_SIM_ONLY=name,...
func TestFigures(t *testing.T) {
	v := os.Getenv("SLUICE_SIM_FIGURES")
	if v == "" {
		t.Skip("set SLUICE_SIM_FIGURES=60s to print issue 18's table")
	}
	dur, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("SLUICE_SIM_FIGURES=%q: %v", v, err)
	}
	only := os.Getenv("SLUICE_SIM_ONLY")
	var rows []sim.Row
	scs := fleet.Issue18Scenarios(dur)
	for _, sc := range scs {
		if only != "" && !strings.Contains(","+only+",", ","+sc.Name+",") {
			continue
		}
		for _, c := range []struct {
			c     sim.Contender
			extra int
		}{
			{fleet.Sluice("sluice", true, fleet.FigureOptions()), sc.Processes},
			{fleet.FixedGCRA("fixed-0.9x", 0.9), 0},
		} {
			s := runManual(t, sc, c.c, c.extra)
			rows = append(rows, sim.Row{Scenario: sc.Name, Contender: c.c.Name, Summary: s})
			if os.Getenv("SLUICE_SIM_SECONDS") != "" {
				lastMu.Lock()
				last := lastResult
				lastMu.Unlock()
				for _, x := range last.Seconds {
					fmt.Printf("%s %s t=%d limit=%g offered=%d goodput=%d throttles=%d bans=%d rate=%.1f\n",
						sc.Name, c.c.Name, x.T, x.Limit, x.Offered, x.Goodput, x.Throttles, x.Bans, x.Rate)
				}
			}
		}
	}
	var b strings.Builder
	if err := sim.WriteTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	fmt.Print(b.String())
}
