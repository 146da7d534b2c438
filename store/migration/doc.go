// Package migration applies Sluice's database schema: numbered SQL files per
// dialect, embedded in the binary, applied and reverted through
// database/sql.
//
// Each dialect has its own numbered files under postgres/ and sqlite/
// (NNNN_name.up.sql and NNNN_name.down.sql). A Migrator applies the pending
// ones in order, each in its own transaction together with its row in the
// bookkeeping table sluice_schema_migrations, and reverts the latest ones on
// Down. Several processes may call Up at once (every replica migrating as it
// boots): on PostgreSQL a session advisory lock, held on one dedicated
// connection for the whole call, serializes them; on SQLite every migration
// runs under BEGIN IMMEDIATE and re-reads what is applied first. Either way
// each migration is applied exactly once.
//
// On PostgreSQL the tables and functions go into the connection's current
// schema (the first schema of search_path that exists), so a schema per
// tenant or per test is a matter of search_path.
//
// The `sluice migrate up|down|status` command is a thin shell over Open (a
// database URL: postgres://... or sqlite:PATH), Up, Down and Status.
package migration
