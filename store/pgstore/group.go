package pgstore

import (
	"context"

	"github.com/sluicerl/sluice/store"
)

// ListGroups implements store.JobStore.
func (s *Store) ListGroups(ctx context.Context, p store.ListParams) ([]store.Group, error) {
	limit, err := p.EffectiveLimit()
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT group_key, weight FROM sluice_job_groups WHERE group_key > $1 ORDER BY group_key LIMIT $2`, p.After, limit)
	if err != nil {
		return nil, wrap("list groups", err)
	}
	out, err := collect(rows, func(scan func(...any) error) (store.Group, error) {
		var g store.Group
		err := scan(&g.Key, &g.Weight)
		return g, err
	})
	if err != nil {
		return nil, wrap("list groups", err)
	}
	return out, nil
}
