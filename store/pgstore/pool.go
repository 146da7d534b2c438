package pgstore

import (
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// CancelGrace is how long a connection whose call's context ended waits
// for the server to answer the cancel request (see ConfigurePool) before
// it is closed as lost.
const CancelGrace = 2 * time.Second

// ConfigurePool makes the pool's connections outlive a call whose context
// ends (a caller's deadline, the guard's store timeout): pgx then sends
// PostgreSQL a cancel request for the running statement and keeps the
// connection, instead of closing it (pgx's default). Without it, every
// timed-out call costs a new connection, and so a new backend process,
// whose set-up makes the next call time out too. A connection whose cancel
// is not answered within CancelGrace (a dead network) is closed. Call it on
// the config before pgxpool.NewWithConfig.
func ConfigurePool(cfg *pgxpool.Config) {
	cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: CancelGrace}
	}
}
