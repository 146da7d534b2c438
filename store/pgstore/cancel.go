package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A call whose context ends makes pgx send PostgreSQL a cancel request for
// the statement on its connection and keep the connection (ConfigurePool).
// The cancel request travels on a connection of its own and PostgreSQL
// applies it to whatever the backend runs when it arrives, so on a busy
// machine it can land on the next statement sent on that connection, made
// by another call whose context is alive: that statement fails with
// query_canceled (SQLSTATE 57014) though nobody cancelled it. Such a
// statement was rolled back whole (each of these calls is one statement,
// or one transaction), so it is run again, up to strayCancelRetries times.
// A statement still cancelled after that (a statement_timeout, say) is
// reported as a timeout (see wrap), never as a broken store.

// sqlStateQueryCanceled is query_canceled.
const sqlStateQueryCanceled = "57014"

// strayCancelRetries is how many times a statement cancelled while its own
// context is alive is run again.
const strayCancelRetries = 3

// canceled reports whether err is PostgreSQL's query_canceled.
func canceled(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == sqlStateQueryCanceled
}

// strayCancel reports whether err cancelled a statement whose own context
// is alive: a cancel request meant for an earlier statement.
func strayCancel(ctx context.Context, err error) bool {
	return ctx.Err() == nil && canceled(err)
}

// retryStray runs f, and runs it again while it fails by a stray cancel.
// f must be one statement or one transaction: a cancelled one left nothing
// behind.
func retryStray(ctx context.Context, f func() error) error {
	for i := 0; ; i++ {
		err := f()
		if err == nil || i == strayCancelRetries || !strayCancel(ctx, err) {
			return err
		}
	}
}

// strayRow is a pgx.Row whose Scan runs its statement again after a stray
// cancel.
type strayRow struct {
	ctx  context.Context
	s    *Store
	sql  string
	args []any
}

func (r strayRow) Scan(dest ...any) error {
	return retryStray(r.ctx, func() error {
		return r.s.pool.QueryRow(r.ctx, r.sql, r.args...).Scan(dest...)
	})
}

// queryRow is pool.QueryRow with retryStray.
func (s *Store) queryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return strayRow{ctx: ctx, s: s, sql: sql, args: args}
}

// exec is pool.Exec with retryStray.
func (s *Store) exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	err := retryStray(ctx, func() error {
		var err error
		tag, err = s.pool.Exec(ctx, sql, args...)
		return err
	})
	return tag, err
}

// timeoutErr is a statement PostgreSQL cancelled on its own (a
// statement_timeout, or stray cancels beyond strayCancelRetries): the
// store is slow, not broken.
type timeoutErr struct{ pe *pgconn.PgError }

func (e *timeoutErr) Error() string { return e.pe.Error() }
func (e *timeoutErr) Unwrap() error { return e.pe }
func (e *timeoutErr) Timeout() bool { return true }
