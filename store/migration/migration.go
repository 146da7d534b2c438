package migration

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Dialect names a database flavour with its own set of migrations.
type Dialect string

const (
	// Postgres is PostgreSQL through a database/sql driver such as pgx's
	// stdlib adapter (github.com/jackc/pgx/v5/stdlib).
	Postgres Dialect = "postgres"
	// SQLite is SQLite through modernc.org/sqlite (driver name "sqlite").
	SQLite Dialect = "sqlite"
)

// AllSteps passed to Down reverts every applied migration.
const AllSteps = math.MaxInt

// Table is the bookkeeping table, one row per applied migration.
const Table = "sluice_schema_migrations"

var (
	// ErrUnknownDialect is returned by New for a dialect without migrations.
	ErrUnknownDialect = errors.New("migration: unknown dialect")
	// ErrUnknownVersion is returned by Down when the database has a
	// migration applied that this binary does not know (it was migrated by a
	// newer Sluice): it cannot be reverted from here.
	ErrUnknownVersion = errors.New("migration: applied version unknown to this binary")
	// ErrBadSteps is returned by Down for a step count below 1.
	ErrBadSteps = errors.New("migration: steps must be at least 1")
)

//go:embed postgres/*.sql sqlite/*.sql
var files embed.FS

// Migration is one numbered schema change of a dialect.
type Migration struct {
	Version int    // 1, 2, ...: the order of application
	Name    string // from the file name: 0001_rate_state -> "rate_state"
	Up      string // SQL applying it
	Down    string // SQL reverting it
}

// Status is a migration as the database sees it.
type Status struct {
	Version   int
	Name      string
	Applied   bool
	AppliedAt time.Time // zero when not applied
	// Unknown is true for a version the database has applied but this
	// binary has no file for (a newer Sluice migrated it).
	Unknown bool
}

// Direction says whether a Step applied or reverted a migration.
type Direction string

const (
	// DirUp applies a migration.
	DirUp Direction = "up"
	// DirDown reverts a migration.
	DirDown Direction = "down"
)

// Step is one migration applied by Up or reverted by Down.
type Step struct {
	Version   int
	Name      string
	Direction Direction
	// At is when the step was committed; Duration how long it took.
	At       time.Time
	Duration time.Duration
}

// Migrator applies one dialect's migrations to one database. It is safe for
// concurrent use, and Up is safe to run from several processes at once. The
// zero value is not usable; build one with New.
type Migrator struct {
	db         *sql.DB
	dialect    Dialect
	migrations []Migration
	owned      bool // db was opened by Open: Close closes it
}

// New returns a Migrator for db. It does not touch the database.
func New(db *sql.DB, dialect Dialect) (*Migrator, error) {
	if db == nil {
		return nil, errors.New("migration: nil *sql.DB")
	}
	ms, err := Migrations(dialect)
	if err != nil {
		return nil, err
	}
	return &Migrator{db: db, dialect: dialect, migrations: ms}, nil
}

// Migrations returns the embedded migrations of a dialect in version order.
func Migrations(dialect Dialect) ([]Migration, error) {
	switch dialect {
	case Postgres, SQLite:
	default:
		return nil, fmt.Errorf("%w %q (want %q or %q)", ErrUnknownDialect, dialect, Postgres, SQLite)
	}
	return load(files, string(dialect))
}

// load parses NNNN_name.up.sql / NNNN_name.down.sql pairs from dir.
func load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("migration: %w", err)
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		base := e.Name()
		stem, dir2, ok := cutSuffix(base)
		if !ok {
			return nil, fmt.Errorf("migration: %s/%s: want NNNN_name.up.sql or NNNN_name.down.sql", dir, base)
		}
		num, name, ok := strings.Cut(stem, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 || name == "" {
			return nil, fmt.Errorf("migration: %s/%s: want NNNN_name.up.sql or NNNN_name.down.sql", dir, base)
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, base))
		if err != nil {
			return nil, fmt.Errorf("migration: %w", err)
		}
		m := byVersion[v]
		if m == nil {
			m = &Migration{Version: v, Name: name}
			byVersion[v] = m
		}
		if m.Name != name {
			return nil, fmt.Errorf("migration: %s: version %d is named both %q and %q", dir, v, m.Name, name)
		}
		if dir2 == DirUp {
			m.Up = string(b)
		} else {
			m.Down = string(b)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if strings.TrimSpace(m.Up) == "" || strings.TrimSpace(m.Down) == "" {
			return nil, fmt.Errorf("migration: %s: version %d (%s) needs both an up and a down file", dir, m.Version, m.Name)
		}
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration: %s: versions must run 1, 2, 3, ... without gaps; found %d at position %d", dir, m.Version, i+1)
		}
	}
	return out, nil
}

func cutSuffix(base string) (stem string, d Direction, ok bool) {
	if s, ok := strings.CutSuffix(base, ".up.sql"); ok {
		return s, DirUp, true
	}
	if s, ok := strings.CutSuffix(base, ".down.sql"); ok {
		return s, DirDown, true
	}
	return "", "", false
}

// Dialect returns the migrator's dialect.
func (m *Migrator) Dialect() Dialect { return m.dialect }

// Migrations returns the migrations this binary knows, in version order.
func (m *Migrator) Migrations() []Migration { return slices.Clone(m.migrations) }

// Latest returns the highest version this binary knows.
func (m *Migrator) Latest() int { return len(m.migrations) }

// Up applies every pending migration in version order and returns the steps
// it took (none when the schema is current). Each migration commits on its
// own: after an error, the ones before it stay applied.
func (m *Migrator) Up(ctx context.Context) ([]Step, error) {
	return m.UpTo(ctx, m.Latest())
}

// UpTo applies the pending migrations up to and including version.
func (m *Migrator) UpTo(ctx context.Context, version int) ([]Step, error) {
	var steps []Step
	err := m.locked(ctx, func(c *sql.Conn) error {
		for {
			var step *Step
			err := m.inTx(ctx, c, func(tx execer) error {
				applied, err := m.applied(ctx, tx)
				if err != nil {
					return err
				}
				for _, mg := range m.migrations {
					if mg.Version > version {
						return nil
					}
					if _, ok := applied[mg.Version]; ok {
						continue
					}
					start := time.Now()
					if _, err := tx.ExecContext(ctx, mg.Up); err != nil {
						return fmt.Errorf("migration: applying %04d_%s: %w", mg.Version, mg.Name, err)
					}
					if err := m.record(ctx, tx, mg); err != nil {
						return err
					}
					step = &Step{Version: mg.Version, Name: mg.Name, Direction: DirUp, Duration: time.Since(start)}
					return nil
				}
				return nil
			})
			if err != nil {
				return err
			}
			if step == nil {
				return nil
			}
			step.At = time.Now()
			steps = append(steps, *step)
		}
	})
	return steps, err
}

// Down reverts the latest steps applied migrations, newest first, each in
// its own transaction, and returns what it reverted. AllSteps reverts every
// one. Reverting drops the tables and with them every piece of state.
func (m *Migrator) Down(ctx context.Context, steps int) ([]Step, error) {
	if steps < 1 {
		return nil, ErrBadSteps
	}
	var out []Step
	err := m.locked(ctx, func(c *sql.Conn) error {
		for len(out) < steps {
			var step *Step
			err := m.inTx(ctx, c, func(tx execer) error {
				applied, err := m.applied(ctx, tx)
				if err != nil {
					return err
				}
				latest := 0
				for v := range applied {
					latest = max(latest, v)
				}
				if latest == 0 {
					return nil
				}
				if latest > len(m.migrations) {
					return fmt.Errorf("%w: version %d (%s)", ErrUnknownVersion, latest, applied[latest].Name)
				}
				mg := m.migrations[latest-1]
				start := time.Now()
				if _, err := tx.ExecContext(ctx, mg.Down); err != nil {
					return fmt.Errorf("migration: reverting %04d_%s: %w", mg.Version, mg.Name, err)
				}
				if _, err := tx.ExecContext(ctx, m.q("DELETE FROM "+Table+" WHERE version = ?"), mg.Version); err != nil {
					return fmt.Errorf("migration: unrecording %04d_%s: %w", mg.Version, mg.Name, err)
				}
				step = &Step{Version: mg.Version, Name: mg.Name, Direction: DirDown, Duration: time.Since(start)}
				return nil
			})
			if err != nil {
				return err
			}
			if step == nil {
				return nil
			}
			step.At = time.Now()
			out = append(out, *step)
		}
		return nil
	})
	return out, err
}

// Status returns every known migration, and every applied one this binary
// does not know, in version order, saying which are applied and when. It
// only reads: on a database never migrated, nothing is applied.
func (m *Migrator) Status(ctx context.Context) ([]Status, error) {
	var applied map[int]Status
	err := m.withConn(ctx, func(c *sql.Conn) error {
		ok, err := m.tableExists(ctx, c)
		if err != nil || !ok {
			return err
		}
		applied, err = m.applied(ctx, c)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]Status, 0, max(len(m.migrations), len(applied)))
	for _, mg := range m.migrations {
		st := Status{Version: mg.Version, Name: mg.Name}
		if a, ok := applied[mg.Version]; ok {
			st.Applied, st.AppliedAt = true, a.AppliedAt
		}
		out = append(out, st)
	}
	for v, a := range applied {
		if v > len(m.migrations) {
			a.Unknown = true
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b Status) int { return a.Version - b.Version })
	return out, nil
}

// Current returns the highest applied version, 0 for an empty database.
func (m *Migrator) Current(ctx context.Context) (int, error) {
	st, err := m.Status(ctx)
	if err != nil {
		return 0, err
	}
	cur := 0
	for _, s := range st {
		if s.Applied {
			cur = max(cur, s.Version)
		}
	}
	return cur, nil
}

// execer is what both *sql.Conn and *sql.Tx offer.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// q rewrites ? placeholders to $n for PostgreSQL.
func (m *Migrator) q(s string) string {
	if m.dialect != Postgres {
		return s
	}
	var b strings.Builder
	n := 0
	for _, r := range s {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (m *Migrator) withConn(ctx context.Context, f func(*sql.Conn) error) error {
	c, err := m.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migration: connecting: %w", err)
	}
	defer c.Close()
	return f(c)
}

// locked runs f on a dedicated connection while holding the migration lock
// (PostgreSQL: a session advisory lock per schema; SQLite: none, since every
// transaction is BEGIN IMMEDIATE), after making sure the bookkeeping table
// exists.
func (m *Migrator) locked(ctx context.Context, f func(*sql.Conn) error) error {
	return m.withConn(ctx, func(c *sql.Conn) error {
		if m.dialect == Postgres {
			var schema sql.NullString
			if err := c.QueryRowContext(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
				return fmt.Errorf("migration: %w", err)
			}
			if !schema.Valid {
				return errors.New("migration: no schema of search_path exists; create it first")
			}
			key := lockKey(schema.String)
			if _, err := c.ExecContext(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
				return fmt.Errorf("migration: taking the migration lock: %w", err)
			}
			defer func() {
				// A failed unlock leaves the session holding the lock:
				// drop the connection instead of returning it to the pool.
				ctx := context.WithoutCancel(ctx)
				if _, err := c.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", key); err != nil {
					_ = c.Raw(func(any) error { return driver.ErrBadConn })
				}
			}()
		}
		if err := m.ensureTable(ctx, c); err != nil {
			return err
		}
		return f(c)
	})
}

// lockKey is the advisory lock key of a schema's migrations.
func lockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("sluice_schema_migrations\x00"))
	h.Write([]byte(schema))
	return int64(h.Sum64())
}

func (m *Migrator) tableExists(ctx context.Context, c *sql.Conn) (bool, error) {
	var n int
	query := "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?"
	if m.dialect == Postgres {
		query = "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = current_schema() AND tablename = $1"
	}
	if err := c.QueryRowContext(ctx, query, Table).Scan(&n); err != nil {
		return false, fmt.Errorf("migration: looking for %s: %w", Table, err)
	}
	return n > 0, nil
}

func (m *Migrator) ensureTable(ctx context.Context, c *sql.Conn) error {
	ddl := `CREATE TABLE IF NOT EXISTS ` + Table + ` (
    version    bigint PRIMARY KEY,
    name       text   NOT NULL,
    applied_at bigint NOT NULL
)`
	if m.dialect == SQLite {
		// Under BEGIN IMMEDIATE so that two processes creating it at once
		// queue on busy_timeout rather than fail.
		return m.inTx(ctx, c, func(tx execer) error {
			_, err := tx.ExecContext(ctx, ddl)
			if err != nil {
				return fmt.Errorf("migration: creating %s: %w", Table, err)
			}
			return nil
		})
	}
	if _, err := c.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("migration: creating %s: %w", Table, err)
	}
	return nil
}

// applied reads the bookkeeping table.
func (m *Migrator) applied(ctx context.Context, c execer) (map[int]Status, error) {
	rows, err := c.QueryContext(ctx, "SELECT version, name, applied_at FROM "+Table)
	if err != nil {
		return nil, fmt.Errorf("migration: reading %s: %w", Table, err)
	}
	defer rows.Close()
	out := map[int]Status{}
	for rows.Next() {
		var v, at int64
		var name string
		if err := rows.Scan(&v, &name, &at); err != nil {
			return nil, fmt.Errorf("migration: reading %s: %w", Table, err)
		}
		out[int(v)] = Status{Version: int(v), Name: name, Applied: true, AppliedAt: time.UnixMicro(at).UTC()}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("migration: reading %s: %w", Table, err)
	}
	return out, nil
}

func (m *Migrator) record(ctx context.Context, tx execer, mg Migration) error {
	_, err := tx.ExecContext(ctx, m.q("INSERT INTO "+Table+" (version, name, applied_at) VALUES (?, ?, ?)"),
		mg.Version, mg.Name, time.Now().UnixMicro())
	if err != nil {
		return fmt.Errorf("migration: recording %04d_%s: %w", mg.Version, mg.Name, err)
	}
	return nil
}

// inTx runs f in a transaction on c: BEGIN IMMEDIATE on SQLite (the write
// lock up front, so that what f reads stays true until it commits), a plain
// transaction on PostgreSQL (where the advisory lock already serializes).
func (m *Migrator) inTx(ctx context.Context, c *sql.Conn, f func(execer) error) error {
	if m.dialect == Postgres {
		tx, err := c.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("migration: %w", err)
		}
		if err := f(tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migration: %w", err)
		}
		return nil
	}
	if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("migration: beginning a transaction: %w", err)
	}
	if err := f(c); err != nil {
		_, _ = c.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		return err
	}
	if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
		_, _ = c.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		return fmt.Errorf("migration: %w", err)
	}
	return nil
}
