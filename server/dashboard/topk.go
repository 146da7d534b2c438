package dashboard

import "slices"

// topK is the space-saving sketch (Metwally, Agrawal, El Abbadi 2005) of
// the k most frequent keys: k counters; a key not held takes the smallest
// counter's place, inheriting its count as its error. Each held count is
// an upper bound of the key's true count and count-err a lower bound. Not
// safe for concurrent use.
type topK struct {
	k     int
	index map[string]int // key -> position in items
	items []hotItem
}

type hotItem struct {
	key        string
	count, err int64
}

func newTopK(k int) topK { return topK{k: k, index: make(map[string]int, k)} }

func (t *topK) add(key string) {
	if i, ok := t.index[key]; ok {
		t.items[i].count++
		return
	}
	if len(t.items) < t.k {
		t.index[key] = len(t.items)
		t.items = append(t.items, hotItem{key: key, count: 1})
		return
	}
	m := 0
	for i := range t.items {
		if t.items[i].count < t.items[m].count {
			m = i
		}
	}
	delete(t.index, t.items[m].key)
	min := t.items[m].count
	t.items[m] = hotItem{key: key, count: min + 1, err: min}
	t.index[key] = m
}

func (t *topK) list(n int) []HotKey {
	out := make([]HotKey, len(t.items))
	for i, it := range t.items {
		out[i] = HotKey{Key: it.key, Count: it.count, Error: it.err}
	}
	slices.SortFunc(out, func(a, b HotKey) int {
		if a.Count != b.Count {
			if a.Count > b.Count {
				return -1
			}
			return 1
		}
		return compareStrings(a.Key, b.Key)
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}
