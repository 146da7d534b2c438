// Package testenv tells integration tests where the real services are and
// what to do when one is missing: skip with a message that says how to run
// them, or fail under SLUICE_INTEGRATION=1 (which `make test` sets).
package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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

// PostgresSchema creates a schema of the test's own (its name is prefix
// and random hex) on the PostgreSQL at PostgresURL, drops it with
// everything in it when the test ends, and returns its name. Pools the test
// opens after calling it close first (t.Cleanup runs last-in first-out). An
// unreachable PostgreSQL ends the test as Unreachable does.
func PostgresSchema(t testing.TB, prefix string) string {
	t.Helper()
	url := PostgresURL()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		Unreachable(t, "PostgreSQL at "+url, err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	schema := prefix + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		_ = conn.Close(ctx)
		t.Fatalf("creating schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
		_ = conn.Close(ctx)
	})
	return schema
}

// WithSearchPath returns a PostgreSQL URL whose connections use schema.
func WithSearchPath(url, schema string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "search_path=" + schema
}

// SyncBuffer is a bytes.Buffer safe for concurrent writes and reads, for
// tests that read what a logger or a child process wrote. Its zero value
// is an empty buffer.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
