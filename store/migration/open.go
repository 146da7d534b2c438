package migration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"modernc.org/sqlite" // also registers the "sqlite" database/sql driver
)

// Open connects to the database a URL names and returns a Migrator that
// owns the connection (release it with Close):
//
//	postgres://user@host:5432/db?sslmode=disable   (also postgresql://)
//	sqlite:path/to/file.db                          (also sqlite://path)
//
// For PostgreSQL the URL's search_path option, if any, picks the schema,
// e.g. postgres://host/db?search_path=tenant1. For SQLite the file is
// created if missing and opened in WAL mode with a busy timeout, as
// store/sqlitestore opens it.
func Open(ctx context.Context, rawURL string) (*Migrator, error) {
	d, db, err := openURL(rawURL)
	if err != nil {
		return nil, err
	}
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("migration: %w", err)
	}
	m, err := New(db, d)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	m.owned = true
	return m, nil
}

// ParseURL returns the dialect a database URL names.
func ParseURL(rawURL string) (Dialect, error) {
	switch {
	case strings.HasPrefix(rawURL, "postgres://"), strings.HasPrefix(rawURL, "postgresql://"):
		return Postgres, nil
	case strings.HasPrefix(rawURL, "sqlite:"):
		return SQLite, nil
	}
	return "", fmt.Errorf("%w: cannot tell the database from %q (want postgres://... or sqlite:PATH)", ErrUnknownDialect, redact(rawURL))
}

// SQLitePath returns the file path of a sqlite: URL.
func SQLitePath(rawURL string) (string, error) {
	p, ok := strings.CutPrefix(rawURL, "sqlite:")
	if !ok {
		return "", fmt.Errorf("migration: %q is not a sqlite: URL", rawURL)
	}
	p = strings.TrimPrefix(p, "//")
	if p == "" {
		return "", errors.New("migration: sqlite: URL without a path")
	}
	return p, nil
}

func openURL(rawURL string) (Dialect, *sql.DB, error) {
	d, err := ParseURL(rawURL)
	if err != nil {
		return "", nil, err
	}
	if d == Postgres {
		cfg, err := pgx.ParseConfig(rawURL)
		if err != nil {
			return "", nil, fmt.Errorf("migration: %s: %w", redact(rawURL), err)
		}
		return d, stdlib.OpenDB(*cfg), nil
	}
	path, err := SQLitePath(rawURL)
	if err != nil {
		return "", nil, err
	}
	db, err := OpenSQLite(context.Background(), path, 0)
	if err != nil {
		return "", nil, err
	}
	return d, db, nil
}

// OpenSQLite opens (creating if needed) a SQLite file the way Sluice uses
// one: every connection with a busy timeout (zero means 5 seconds) and
// synchronous=FULL, the file in WAL mode. Switching a new file to WAL needs
// the file to itself and does not wait on the busy timeout, so when several
// processes open a new file at once, OpenSQLite retries until it is done.
func OpenSQLite(ctx context.Context, path string, busyTimeout time.Duration) (*sql.DB, error) {
	if path == "" || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("migration: bad SQLite path %q (empty, or holds ? or #)", path)
	}
	if busyTimeout <= 0 {
		busyTimeout = 5 * time.Second
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "synchronous(FULL)")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("migration: %w", err)
	}
	deadline := time.Now().Add(busyTimeout)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		var mode string
		err = db.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode)
		if err == nil && !strings.EqualFold(mode, "wal") {
			err = fmt.Errorf("journal_mode is %q, not wal", mode)
		}
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			err = ctx.Err()
		case <-t.C:
			continue
		}
		break
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("migration: switching %s to WAL: %w", path, err)
	}
	return db, nil
}

// IsBusy reports whether err is SQLite's SQLITE_BUSY (any extended code):
// the file's lock was not had within busy_timeout.
func IsBusy(err error) bool { return isBusy(err) }

// isBusy reports whether err is SQLite's SQLITE_BUSY (any extended code).
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == 5
}

// redact drops a password from a URL for error messages.
func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.User == nil {
		return rawURL
	}
	return u.Redacted()
}

// Close releases the database connection if Open made it; for a Migrator
// from New it does nothing (the caller owns the *sql.DB).
func (m *Migrator) Close() error {
	if !m.owned {
		return nil
	}
	return m.db.Close()
}
