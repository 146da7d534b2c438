package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/migration"
	"github.com/sluicerl/sluice/store/pgstore"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

// candle is one kline as the handler parsed it.
type candle struct {
	OpenTime                       int64
	Open, High, Low, Close, Volume float64
}

// records is where a process keeps the job records, the limiter's state and
// the candles: one SQLite file, or one PostgreSQL schema. Every process
// opens its own.
type records struct {
	jobs    store.JobStore
	rates   store.RateStore
	db      *sql.DB
	dialect string // "sqlite" or "postgres"
	close   func()
}

// openRecords opens the SQLite file at path, or, when pgURL is set, the
// PostgreSQL database it names (its search_path picks the schema), and
// creates the candles table.
func openRecords(ctx context.Context, path, pgURL string) (*records, error) {
	var r *records
	if pgURL != "" {
		pool, err := pgxpool.New(ctx, pgURL)
		if err != nil {
			return nil, fmt.Errorf("postgres: %w", err)
		}
		if _, err := pgstore.Migrate(ctx, pool); err != nil {
			pool.Close()
			return nil, fmt.Errorf("postgres: migrate: %w", err)
		}
		st, err := pgstore.New(pool, pgstore.Config{})
		if err != nil {
			pool.Close()
			return nil, err
		}
		db := stdlib.OpenDBFromPool(pool)
		r = &records{jobs: st, rates: st, db: db, dialect: "postgres", close: func() { _ = db.Close(); pool.Close() }}
	} else {
		st, err := sqlitestore.Open(ctx, path, sqlitestore.Config{})
		if err != nil {
			return nil, err
		}
		db, err := migration.OpenSQLite(ctx, path, 10*time.Second)
		if err != nil {
			_ = st.Close()
			return nil, err
		}
		r = &records{jobs: st, rates: st, db: db, dialect: "sqlite", close: func() { _ = db.Close(); _ = st.Close() }}
	}
	// writes counts how many times a candle was written: 1 unless a slice
	// was fetched and written again (a worker lost its lease mid-slice).
	if _, err := r.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS candles (
    symbol     text NOT NULL,
    timeframe  text NOT NULL,
    open_time  bigint NOT NULL,
    open       double precision NOT NULL,
    high       double precision NOT NULL,
    low        double precision NOT NULL,
    close      double precision NOT NULL,
    volume     double precision NOT NULL,
    token      bigint NOT NULL,
    writes     integer NOT NULL DEFAULT 1,
    PRIMARY KEY (symbol, timeframe, open_time))`); err != nil {
		r.close()
		return nil, fmt.Errorf("creating the candles table: %w", err)
	}
	return r, nil
}

// q writes a query's ? placeholders as $n for PostgreSQL.
func (r *records) q(query string) string {
	if r.dialect != "postgres" {
		return query
	}
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// writeCandles writes one slice in one transaction, durably, before the
// handler commits the cursor after it. token is the lease's fencing token
// (kept with the row, for the reader's curiosity).
func (r *records) writeCandles(ctx context.Context, symbol, timeframe string, token int64, cs []candle) error {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	stmt, err := tx.PrepareContext(ctx, r.q(`INSERT INTO candles (symbol, timeframe, open_time, open, high, low, close, volume, token)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (symbol, timeframe, open_time) DO UPDATE SET writes = candles.writes + 1, token = excluded.token`))
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, c := range cs {
		if _, err := stmt.ExecContext(ctx, symbol, timeframe, c.OpenTime, c.Open, c.High, c.Low, c.Close, c.Volume, token); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// streamCount is what the candles table holds for one stream.
type streamCount struct {
	Candles     int64
	First, Last int64 // open times, Unix ms
	Rewritten   int64 // candles written more than once
}

// countCandles reads the candles table per "SYMBOL TIMEFRAME".
func (r *records) countCandles(ctx context.Context) (map[string]streamCount, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT symbol, timeframe, count(*), min(open_time), max(open_time),
    sum(CASE WHEN writes > 1 THEN 1 ELSE 0 END) FROM candles GROUP BY symbol, timeframe`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]streamCount{}
	for rows.Next() {
		var sym, tf string
		var c streamCount
		if err := rows.Scan(&sym, &tf, &c.Candles, &c.First, &c.Last, &c.Rewritten); err != nil {
			return nil, err
		}
		out[sym+" "+tf] = c
	}
	return out, rows.Err()
}

// candleRow reads one stored candle, for checks.
func (r *records) candleRow(ctx context.Context, symbol, timeframe string, openTime int64) (candle, error) {
	c := candle{OpenTime: openTime}
	err := r.db.QueryRowContext(ctx, r.q(`SELECT open, high, low, close, volume FROM candles WHERE symbol = ? AND timeframe = ? AND open_time = ?`),
		symbol, timeframe, openTime).Scan(&c.Open, &c.High, &c.Low, &c.Close, &c.Volume)
	return c, err
}
