package auth

import (
	"fmt"
	"math/bits"
	"strings"
)

// Scope is a set of permissions: one bit per scope. A route needs one
// scope; a token holds a set. The zero value is the empty set, which no
// route may need (server.New refuses a route without a scope).
type Scope uint8

// The scopes.
const (
	Read Scope = 1 << iota
	Take
	Lease
	Slots
	Jobs
	Admin
	// Public marks a route that needs no token (/healthz, /metrics). It
	// cannot be granted to a token.
	Public

	// All is every grantable scope ("*" in a token file).
	All = Read | Take | Lease | Slots | Jobs | Admin
)

var scopeNames = []struct {
	s    Scope
	name string
}{{Read, "read"}, {Take, "take"}, {Lease, "lease"}, {Slots, "slots"}, {Jobs, "jobs"}, {Admin, "admin"}, {Public, "public"}}

// String writes the set as a comma-separated list ("take,lease"); All is
// "*" and the empty set "".
func (s Scope) String() string {
	if s == All {
		return "*"
	}
	var names []string
	for _, n := range scopeNames {
		if s&n.s != 0 {
			names = append(names, n.name)
		}
	}
	return strings.Join(names, ",")
}

// Has reports whether s holds every scope of need.
func (s Scope) Has(need Scope) bool { return need != 0 && s&need == need }

// single reports whether s is exactly one scope.
func (s Scope) single() bool { return bits.OnesCount8(uint8(s)) == 1 }

// ParseScopes reads a comma-separated list of scope names ("take,lease";
// "*" for all). Spaces around names are ignored; an empty list, an unknown
// name or "public" is an error naming it.
func ParseScopes(list string) (Scope, error) {
	var out Scope
	for _, name := range strings.Split(list, ",") {
		s, err := parseScope(strings.TrimSpace(name))
		if err != nil {
			return 0, err
		}
		out |= s
	}
	return out, nil
}

func parseScope(name string) (Scope, error) {
	if name == "*" {
		return All, nil
	}
	for _, n := range scopeNames {
		if n.name == name && n.s != Public {
			return n.s, nil
		}
	}
	if name == "" {
		return 0, fmt.Errorf("auth: empty scope name; want read, take, lease, slots, jobs, admin or *")
	}
	return 0, fmt.Errorf("auth: unknown scope %q; want read, take, lease, slots, jobs, admin or *", truncate(name, 32))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
