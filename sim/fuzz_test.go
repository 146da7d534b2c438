package sim

import (
	"testing"
)

// FuzzParseScenario: any input either fails with ErrInvalidConfig-style
// errors or gives a scenario whose provider can be built.
func FuzzParseScenario(f *testing.F) {
	for _, s := range []string{
		"",
		"provider: {dialect: bare-429, limit: 50}\n",
		"name: x\nprovider:\n  dialect: cost-bucket\n  limit: 10\n  changes: [{at: 5s, limit: 5}]\nworkers: 4\nprocesses: 2\nduration: 10s\n",
		"provider: {dialect: weight-window, weight: 3, window: 10s}\nslow_after: 1s\n",
		"provider: {limit: -1}\n",
		"{\"provider\": {\"dialect\": \"ban\", \"ban_after\": 3}}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sc, err := ParseScenario(b)
		if err != nil {
			return
		}
		if sc.Workers <= 0 || sc.Processes <= 0 || sc.Processes > sc.Workers || sc.Duration < 1e9 {
			t.Fatalf("accepted an invalid scenario: %+v", sc)
		}
		if _, err := NewProvider(sc.Provider); err != nil {
			t.Fatalf("accepted a scenario whose provider fails: %v", err)
		}
	})
}
