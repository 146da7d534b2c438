package bench

import "testing"

// The same functions cmd/sluicebench runs, as go test benchmarks:
//
//	go test -bench . -benchmem ./...
//	go test -bench 'Serial/allowed' -cpuprofile cpu.out
func BenchmarkSerial(b *testing.B) { runGroup(b, "serial/") }

func BenchmarkParallel(b *testing.B) { runGroup(b, "parallel/") }

func runGroup(b *testing.B, prefix string) {
	for _, c := range Cases() {
		if len(c.ID) > len(prefix) && c.ID[:len(prefix)] == prefix {
			b.Run(c.ID[len(prefix):], c.F)
		}
	}
}

func BenchmarkHTTPTake(b *testing.B) { HTTPTake(b) }
