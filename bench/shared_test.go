package bench

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// The shared-state cases cmd/sluicebench runs, as go test benchmarks (one
// plain benchmark per case, not alternated):
//
//	go test -run '^$' -bench 'Redis/(sluice|redis_rate)/g64' .
//	go test -run '^$' -bench 'Postgres/keys100' -benchtime 3s .
//	go test -run '^$' -bench 'Redis/sluice/g1' -cpuprofile cpu.out .
//
// A service that cannot be reached skips its benchmarks (and fails them
// under SLUICE_INTEGRATION=1).
func BenchmarkRedis(b *testing.B) { benchSection(b, "redis") }

func BenchmarkPostgres(b *testing.B) { benchSection(b, "postgres") }

func BenchmarkSQLite(b *testing.B) { benchSection(b, "sqlite") }

func benchSection(b *testing.B, name string) {
	sec := openSection(b, name)
	for _, c := range sec.Cases {
		b.Run(strings.TrimPrefix(c.ID, name+"/"), c.Bench)
	}
}

// openSection opens the named section for the test, closing it at the
// end; it skips when the service is unreachable, unless SLUICE_INTEGRATION
// is 1.
func openSection(tb testing.TB, name string) *Section {
	tb.Helper()
	var sec *Section
	for _, s := range SharedSections(SharedConfig{TempDir: tb.TempDir()}) {
		if s.Name == name {
			sec = s
		}
	}
	if sec == nil {
		tb.Fatalf("no section %q", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sec.Open(ctx); err != nil {
		if name == "sqlite" || os.Getenv("SLUICE_INTEGRATION") == "1" {
			tb.Fatal(err)
		}
		tb.Skipf("skipped: %v", err)
	}
	tb.Cleanup(func() {
		if err := sec.Close(context.Background()); err != nil {
			tb.Error(err)
		}
	})
	return sec
}

// TestSharedSections runs every shared-state case briefly against the real
// services and checks that each one decides and allows every call, and that
// Close removes what the section wrote (Close checks it for Redis).
func TestSharedSections(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"redis", "postgres", "sqlite"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sec := openSection(t, name)
			for _, c := range sec.Cases {
				s, err := c.RunFor(context.Background(), 20*time.Millisecond)
				if err != nil {
					t.Fatal(err)
				}
				if s.Ops == 0 || s.Allowed != s.Ops {
					t.Errorf("%s: %d decisions, %d allowed; want some, all allowed", c.ID, s.Ops, s.Allowed)
				}
			}
			// The fixed-count form go test's benchmarks use.
			c := sec.Cases[len(sec.Cases)-1]
			s, err := c.load(context.Background(), func(i int64) bool { return i < 50 })
			if err != nil {
				t.Fatal(err)
			}
			if s.Ops != 50 {
				t.Errorf("%s: %d decisions, want exactly 50", c.ID, s.Ops)
			}
		})
	}
}

func TestSharedCaseIDs(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, c := range Cases() {
		seen[c.ID] = true
	}
	for _, sec := range SharedSections(SharedConfig{}) {
		groups := map[Group]bool{}
		for _, g := range sec.Groups {
			groups[g] = true
		}
		for _, c := range sec.Cases {
			if seen[c.ID] {
				t.Errorf("duplicate id %s", c.ID)
			}
			seen[c.ID] = true
			if !strings.HasPrefix(c.ID, sec.Name+"/") {
				t.Errorf("%s: id must start with %s/", c.ID, sec.Name)
			}
			if !groups[c.Group] {
				t.Errorf("%s: group %q is not among the section's groups", c.ID, c.Group)
			}
			if c.Workers < 1 || c.op == nil {
				t.Errorf("%s: %d workers, op set: %v", c.ID, c.Workers, c.op != nil)
			}
		}
	}
}

func TestSectionOpenUnreachable(t *testing.T) {
	t.Parallel()
	cfg := SharedConfig{RedisURL: "redis://127.0.0.1:1", PostgresURL: "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2"}
	for _, sec := range SharedSections(cfg)[:2] {
		err := sec.Open(context.Background())
		if err == nil {
			_ = sec.Close(context.Background())
			t.Fatalf("%s: Open on a closed port succeeded", sec.Name)
		}
		if !strings.Contains(err.Error(), "unreachable") {
			t.Errorf("%s: error %q does not say the service is unreachable", sec.Name, err)
		}
		if err := sec.Close(context.Background()); err != nil {
			t.Errorf("%s: Close after a failed Open: %v", sec.Name, err)
		}
	}
}
