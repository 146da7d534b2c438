package limiter_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// FuzzParse checks that Parse never panics, that a rejected file is reported
// as located ConfigErrors, and that every accepted file gives policies a
// Limiter takes and can decide with. The seed corpus in
// testdata/fuzz/FuzzParse holds a valid file and one of each kind of error.
func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile("../examples/policies.yaml"); err == nil {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, err := limiter.Parse("fuzz.yaml", data)
		if err != nil {
			if ps != nil {
				t.Fatalf("policies returned with an error: %v", ps)
			}
			var ces limiter.ConfigErrors
			if !errors.As(err, &ces) || len(ces) == 0 {
				t.Fatalf("error %T is not ConfigErrors: %v", err, err)
			}
			for _, e := range ces {
				if e == nil || e.File != "fuzz.yaml" || e.Msg == "" || e.Line < 0 || e.Column < 0 {
					t.Fatalf("malformed ConfigError %#v", e)
				}
			}
			return
		}
		seen := make(map[string]bool, len(ps))
		for _, p := range ps {
			if err := p.Validate(); err != nil {
				t.Fatalf("accepted policy %+v does not validate: %v", p, err)
			}
			if seen[p.Name] {
				t.Fatalf("accepted duplicate policy %q", p.Name)
			}
			seen[p.Name] = true
		}
		clk := clocktest.New(t0)
		l, err := limiter.New(limiter.Config{
			Store:    memstore.New(memstore.Config{Clock: clk, Shards: 1}),
			Clock:    clk,
			Policies: ps,
		})
		if err != nil {
			t.Fatalf("New rejects accepted policies: %v", err)
		}
		for _, p := range ps {
			if p.Algorithm == store.Concurrency {
				// A fresh key always grants a lease.
				r, err := l.Acquire(context.Background(), p.Name, "k", "h")
				if err != nil || !r.Acquired {
					t.Fatalf("policy %+v: first Acquire = %+v, %v", p, r, err)
				}
				continue
			}
			// A fresh key always admits one unit.
			d, err := l.Allow(context.Background(), p.Name, "k")
			if err != nil || !d.Allowed {
				t.Fatalf("policy %+v: first Allow = %+v, %v", p, d, err)
			}
		}
	})
}
