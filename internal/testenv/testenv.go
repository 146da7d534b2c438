// Package testenv tells integration tests where the real services are and
// what to do when one is missing: skip with a message that says how to run
// them, or fail under SLUICE_INTEGRATION=1 (which `make test` sets).
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// RedisURL is SLUICE_TEST_REDIS_URL, or the local default.
func RedisURL() string { return env("SLUICE_TEST_REDIS_URL", "redis://127.0.0.1:6379") }

// PostgresURL is SLUICE_TEST_POSTGRES_URL, or the local default.
func PostgresURL() string {
	return env("SLUICE_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Unreachable ends a test whose service could not be reached: a failure
// under SLUICE_INTEGRATION=1, a skip that says how to run it otherwise.
func Unreachable(t testing.TB, what string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s unreachable: %v", what, err)
	if os.Getenv("SLUICE_INTEGRATION") == "1" {
		t.Fatal(msg + " (SLUICE_INTEGRATION=1: integration tests must run)")
	}
	t.Skip(msg + "; run `make test`, which starts Redis and PostgreSQL (see DEVELOPERS.md)")
}
