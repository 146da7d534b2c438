package migration_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/testenv"
	"github.com/sluicerl/sluice/store/migration"
)

// pgDB returns a database/sql handle whose search_path is a new schema of
// its own, dropped when the test ends; it skips (fails under
// SLUICE_INTEGRATION=1) without PostgreSQL.
func pgDB(t *testing.T) *sql.DB {
	t.Helper()
	schema := testenv.PostgresSchema(t, "sluice_test_")
	cfg, err := pgx.ParseConfig(testenv.PostgresURL())
	require.NoError(t, err)
	cfg.RuntimeParams["search_path"] = schema
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = db.Close() }) // before the schema is dropped
	return db
}

func sqliteDB(t *testing.T) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.db")
	db, err := migration.OpenSQLite(context.Background(), path, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func TestEmbeddedMigrations(t *testing.T) {
	t.Parallel()
	for _, d := range []migration.Dialect{migration.Postgres, migration.SQLite} {
		ms, err := migration.Migrations(d)
		require.NoError(t, err, d)
		require.NotEmpty(t, ms, d)
		require.Equal(t, "rate_state", ms[0].Name, d)
		for i, m := range ms {
			require.Equal(t, i+1, m.Version, d)
			require.NotEmpty(t, m.Up, d)
			require.NotEmpty(t, m.Down, d)
		}
	}
	_, err := migration.Migrations("oracle")
	require.ErrorIs(t, err, migration.ErrUnknownDialect)
	_, err = migration.New(nil, migration.SQLite)
	require.Error(t, err)
}

// roundTrip applies, inspects, reverts and reapplies every migration.
func roundTrip(t *testing.T, db *sql.DB, d migration.Dialect, tables func() []string) {
	ctx := context.Background()
	m, err := migration.New(db, d)
	require.NoError(t, err)
	n := m.Latest()

	st, err := m.Status(ctx)
	require.NoError(t, err)
	require.Len(t, st, n)
	for _, s := range st {
		require.False(t, s.Applied, "nothing applied on a new database")
	}
	cur, err := m.Current(ctx)
	require.NoError(t, err)
	require.Zero(t, cur)

	before := time.Now().Add(-time.Second)
	steps, err := m.Up(ctx)
	require.NoError(t, err)
	require.Len(t, steps, n)
	for i, s := range steps {
		require.Equal(t, i+1, s.Version)
		require.Equal(t, migration.DirUp, s.Direction)
	}
	require.Contains(t, tables(), "sluice_rate_state")

	st, err = m.Status(ctx)
	require.NoError(t, err)
	for _, s := range st {
		require.True(t, s.Applied, s.Name)
		require.True(t, s.AppliedAt.After(before), "applied_at %v", s.AppliedAt)
		require.False(t, s.Unknown)
	}
	again, err := m.Up(ctx)
	require.NoError(t, err)
	require.Empty(t, again, "Up is idempotent")

	steps, err = m.Down(ctx, 1)
	require.NoError(t, err)
	require.Len(t, steps, 1)
	require.Equal(t, n, steps[0].Version)
	require.Equal(t, migration.DirDown, steps[0].Direction)
	cur, err = m.Current(ctx)
	require.NoError(t, err)
	require.Equal(t, n-1, cur)

	steps, err = m.Down(ctx, migration.AllSteps)
	require.NoError(t, err)
	require.Len(t, steps, n-1)
	require.NotContains(t, tables(), "sluice_rate_state")
	steps, err = m.Down(ctx, 1)
	require.NoError(t, err)
	require.Empty(t, steps, "nothing left to revert")
	_, err = m.Down(ctx, 0)
	require.ErrorIs(t, err, migration.ErrBadSteps)

	steps, err = m.UpTo(ctx, 1)
	require.NoError(t, err)
	require.Len(t, steps, 1)
	steps, err = m.Up(ctx)
	require.NoError(t, err)
	require.Len(t, steps, n-1)
	require.Contains(t, tables(), "sluice_rate_state")

	// A version from a newer binary shows up in Status and blocks Down.
	q := "INSERT INTO sluice_schema_migrations (version, name, applied_at) VALUES (999, 'future', 0)"
	_, err = db.ExecContext(ctx, q)
	require.NoError(t, err)
	st, err = m.Status(ctx)
	require.NoError(t, err)
	last := st[len(st)-1]
	require.Equal(t, migration.Status{Version: 999, Name: "future", Applied: true, AppliedAt: time.UnixMicro(0).UTC(), Unknown: true}, last)
	_, err = m.Down(ctx, 1)
	require.ErrorIs(t, err, migration.ErrUnknownVersion)
}

func TestRoundTripSQLite(t *testing.T) {
	t.Parallel()
	db := sqliteDB(t)
	roundTrip(t, db, migration.SQLite, func() []string {
		return names(t, db, "SELECT name FROM sqlite_master WHERE type = 'table'")
	})
}

func TestRoundTripPostgres(t *testing.T) {
	t.Parallel()
	db := pgDB(t)
	roundTrip(t, db, migration.Postgres, func() []string {
		return names(t, db, "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
	})
}

func names(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	rows, err := db.Query(q)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// concurrentUp runs Up from 8 goroutines, each opening its own *sql.DB (as
// 8 booting processes would): every migration is applied exactly once.
func concurrentUp(t *testing.T, open func() (*sql.DB, error), d migration.Dialect) {
	ctx := context.Background()
	const n = 8
	results := make([][]migration.Step, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			db, err := open()
			if err != nil {
				errs[i] = err
				return
			}
			defer db.Close()
			m, err := migration.New(db, d)
			if err != nil {
				errs[i] = err
				return
			}
			results[i], errs[i] = m.Up(ctx)
		}()
	}
	close(start)
	wg.Wait()
	applied := map[int]int{}
	for i := range n {
		require.NoError(t, errs[i])
		for _, s := range results[i] {
			applied[s.Version]++
		}
	}
	ms, err := migration.Migrations(d)
	require.NoError(t, err)
	require.Len(t, applied, len(ms))
	for v, times := range applied {
		require.Equal(t, 1, times, "version %d applied %d times", v, times)
	}
}

func TestConcurrentUpPostgres(t *testing.T) {
	t.Parallel()
	db := pgDB(t)
	var schema string
	require.NoError(t, db.QueryRow("SELECT current_schema()").Scan(&schema))
	concurrentUp(t, func() (*sql.DB, error) {
		cfg, err := pgx.ParseConfig(testenv.PostgresURL())
		if err != nil {
			return nil, err
		}
		cfg.RuntimeParams["search_path"] = schema
		return stdlib.OpenDB(*cfg), nil
	}, migration.Postgres)
	var n int
	require.NoError(t, db.QueryRow("SELECT count(*) FROM sluice_schema_migrations").Scan(&n))
	ms, _ := migration.Migrations(migration.Postgres)
	require.Equal(t, len(ms), n)
}

func TestConcurrentUpSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c.db")
	concurrentUp(t, func() (*sql.DB, error) {
		return migration.OpenSQLite(context.Background(), path, 10*time.Second)
	}, migration.SQLite)
}

// A migration that fails leaves the ones before it applied and itself
// unrecorded: each runs in its own transaction.
func TestFailedMigrationRollsBack(t *testing.T) {
	t.Parallel()
	db := sqliteDB(t)
	ctx := context.Background()
	m, err := migration.New(db, migration.SQLite)
	require.NoError(t, err)
	_, err = m.UpTo(ctx, 1)
	require.NoError(t, err)
	// Sabotage version 2: its table already exists.
	_, err = db.Exec("CREATE TABLE sluice_clock (x int)")
	require.NoError(t, err)
	_, err = m.Up(ctx)
	require.Error(t, err)
	cur, err := m.Current(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, cur)
}

func TestOpenURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := migration.Open(ctx, "mysql://user:secret@host/db")
	require.ErrorIs(t, err, migration.ErrUnknownDialect)
	require.NotContains(t, err.Error(), "secret")
	_, err = migration.Open(ctx, "sqlite:")
	require.Error(t, err)
	d, err := migration.ParseURL("postgresql://h/db")
	require.NoError(t, err)
	require.Equal(t, migration.Postgres, d)
	p, err := migration.SQLitePath("sqlite://var/lib/sluice.db")
	require.NoError(t, err)
	require.Equal(t, "var/lib/sluice.db", p)

	m, err := migration.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "u.db"))
	require.NoError(t, err)
	steps, err := m.Up(ctx)
	require.NoError(t, err)
	require.Len(t, steps, m.Latest())
	require.NoError(t, m.Close())
}

func TestOpenPostgresURLWithSchema(t *testing.T) {
	t.Parallel()
	db := pgDB(t) // creates the schema and skips without PostgreSQL
	var schema string
	require.NoError(t, db.QueryRow("SELECT current_schema()").Scan(&schema))
	ctx := context.Background()
	u := testenv.PostgresURL()
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	m, err := migration.Open(ctx, u+sep+"search_path="+schema)
	require.NoError(t, err)
	defer m.Close()
	steps, err := m.Up(ctx)
	require.NoError(t, err)
	require.Len(t, steps, m.Latest())
	require.Contains(t, names(t, db, "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"), "sluice_rate_state")
}
