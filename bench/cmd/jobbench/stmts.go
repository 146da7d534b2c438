package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// stmtTracer counts the statements sent on the PostgreSQL cases' pools
// (-stmts) and the time from send to result, by statement text.
type stmtTracer struct {
	mu sync.Mutex
	by map[string]*stmtCount
}

type stmtCount struct {
	n     int
	total time.Duration
}

var stmts = &stmtTracer{by: map[string]*stmtCount{}}

type stmtStart struct {
	sql string
	at  time.Time
}

type stmtKey struct{}

func (t *stmtTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, stmtKey{}, stmtStart{d.SQL, time.Now()})
}

func (t *stmtTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	s, ok := ctx.Value(stmtKey{}).(stmtStart)
	if !ok {
		return
	}
	k := strings.Join(strings.Fields(s.sql), " ")
	if len(k) > 90 {
		k = k[:90]
	}
	t.mu.Lock()
	c := t.by[k]
	if c == nil {
		c = &stmtCount{}
		t.by[k] = c
	}
	c.n++
	c.total += time.Since(s.at)
	t.mu.Unlock()
}

func (t *stmtTracer) print(jobs int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	keys := make([]string, 0, len(t.by))
	for k := range t.by {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return int(t.by[b].total - t.by[a].total) })
	fmt.Printf("statements (all PostgreSQL cases; per job of %d; mean time each):\n", jobs)
	for _, k := range keys {
		c := t.by[k]
		if c.n < jobs/100 {
			continue
		}
		fmt.Printf("%8.2f/job %8.0fus  %s\n", float64(c.n)/float64(jobs), float64(c.total.Microseconds())/float64(c.n), k)
	}
}
