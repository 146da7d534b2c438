package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

// SQLiteGroup is the group of the SQLite figures.
const SQLiteGroup Group = "SQLite: GCRA take, 100 keys, always allowed"

var sqliteLimit = store.Limit{Name: "p", Rate: allowRate, Period: time.Second, Burst: allowBurst}

type sqliteSection struct {
	tempDir string
	dir     string
	store   *sqlitestore.Store
}

func newSQLiteSection(cfg SharedConfig) *Section {
	s := &sqliteSection{tempDir: cfg.TempDir}
	sec := &Section{
		Name:   "sqlite",
		Groups: []Group{SQLiteGroup},
		Notes: []string{
			"store/sqlitestore: sqlitestore.Open(ctx, <temp dir>/sluice.db, sqlitestore.Config{}) (WAL, BEGIN IMMEDIATE,",
			"concurrent calls share a transaction), closed and removed afterwards; rate 1e6/s, burst 2^40, keys cycled over 100.",
		},
		open:  s.open,
		close: s.close,
		warm:  s.warm,
	}
	for _, g := range []int{1, 8} {
		sec.Cases = append(sec.Cases, SharedCase{
			ID: fmt.Sprintf("sqlite/sluice/g%d", g), Label: "sluice sqlitestore Take", Group: SQLiteGroup, Workers: g,
			op: s.op,
		})
	}
	return sec
}

func (s *sqliteSection) op(ctx context.Context, i int64) (bool, error) {
	res, err := s.store.Take(ctx, store.TakeParams{Key: Keys[i%100], Limit: sqliteLimit, Cost: 1})
	return res.Allowed, err
}

func (s *sqliteSection) open(ctx context.Context) error {
	dir, err := os.MkdirTemp(s.tempDir, "sluicebench-sqlite-")
	if err != nil {
		return err
	}
	s.dir = dir
	s.store, err = sqlitestore.Open(ctx, filepath.Join(dir, "sluice.db"), sqlitestore.Config{})
	return err
}

func (s *sqliteSection) warm(ctx context.Context) error {
	for i := range int64(100) {
		if _, err := s.op(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

func (s *sqliteSection) close(context.Context) error {
	var errs []error
	if s.store != nil {
		errs = append(errs, s.store.Close())
	}
	if s.dir != "" {
		errs = append(errs, os.RemoveAll(s.dir))
	}
	*s = sqliteSection{tempDir: s.tempDir}
	return errors.Join(errs...)
}
