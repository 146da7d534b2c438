package server

import (
	"context"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/provider"
	"github.com/sluicerl/sluice/slot"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

// fullServer is a Server with every optional part: slots, jobs, outbound.
func fullServer(t *testing.T) *Server {
	t.Helper()
	lim, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{}),
		Policies: []limiter.Policy{{Name: "api", Rate: 10, Period: 1e9, Burst: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "slots.db"), sqlitestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	sch, err := slot.New(slot.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	oc, err := outbound.New(outbound.Config{})
	if err != nil {
		t.Fatal(err)
	}
	set, err := provider.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Limiter: lim, Slots: sch, Jobs: memstore.NewJobStore(memstore.JobConfig{}), Outbound: oc, Providers: provider.NewRegistry(set)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// wildcard matches a net/http path wildcard, {name} or {name...}.
var wildcard = regexp.MustCompile(`\{([^}.]+)(\.\.\.)?\}`)

// TestOpenAPICoversEveryRoute: every route of the route table (with every
// optional part configured) is an operation of openapi.yaml, and every
// operation there is a route. The failure lists what is missing on each
// side, as "METHOD /path" lines to add.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromData(openAPIYAML)
	if err != nil {
		t.Fatalf("openapi.yaml does not load: %v", err)
	}
	var routes, ops []string
	for _, rt := range fullServer(t).endpoints() {
		routes = append(routes, rt.method+" "+wildcard.ReplaceAllString(rt.path, "{$1}"))
	}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			ops = append(ops, method+" "+path)
		}
	}
	var notDocumented, notServed []string
	for _, r := range routes {
		if !slices.Contains(ops, r) {
			notDocumented = append(notDocumented, r)
		}
	}
	for _, o := range ops {
		if !slices.Contains(routes, o) {
			notServed = append(notServed, o)
		}
	}
	slices.Sort(notDocumented)
	slices.Sort(notServed)
	if len(notDocumented) > 0 {
		t.Errorf("routes missing from server/openapi.yaml (add an operation for each):\n  %s", strings.Join(notDocumented, "\n  "))
	}
	if len(notServed) > 0 {
		t.Errorf("operations in server/openapi.yaml that no route serves:\n  %s", strings.Join(notServed, "\n  "))
	}
}
