package provider

import (
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync/atomic"
)

//go:embed profiles/*.yaml
var embedded embed.FS

// DefaultProfile is the profile of a provider that has none of its own.
const DefaultProfile = "ietf"

// Set is a collection of profiles by name. It is immutable and safe for
// concurrent use; the zero value is an empty set.
type Set struct {
	byName map[string]*Profile
	origin map[string]string // where each profile came from
}

// Embedded returns the profiles built into Sluice. They parse at every
// build (a test checks it); an error here is a broken build.
func Embedded() (*Set, error) {
	s := &Set{byName: map[string]*Profile{}, origin: map[string]string{}}
	entries, err := fs.Glob(embedded, "profiles/*.yaml")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		data, err := embedded.ReadFile(e)
		if err != nil {
			return nil, err
		}
		p, err := Parse("embedded:"+e, data)
		if err != nil {
			return nil, err
		}
		if err := s.add(p, "embedded:"+e); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Set) add(p *Profile, origin string) error {
	if prev, dup := s.origin[p.Name]; dup && strings.HasPrefix(origin, "embedded:") == strings.HasPrefix(prev, "embedded:") {
		return fmt.Errorf("provider: %s: profile %q is also defined in %s", origin, p.Name, prev)
	}
	s.byName[p.Name] = p
	s.origin[p.Name] = origin
	return nil
}

// Load returns the embedded profiles overridden by files: a file's profile
// replaces the embedded one of the same name, or adds a provider. Two files
// defining one name are an error. On any error nothing is returned.
func Load(files ...string) (*Set, error) {
	s, err := Embedded()
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		p, err := LoadFile(f)
		if err != nil {
			return nil, err
		}
		if err := s.add(p, f); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Get returns the named profile.
func (s *Set) Get(name string) (*Profile, bool) {
	p, ok := s.byName[name]
	return p, ok
}

// Lookup returns the named profile, or the default profile (DefaultProfile)
// for an empty name.
func (s *Set) Lookup(name string) (*Profile, error) {
	if name == "" {
		name = DefaultProfile
	}
	p, ok := s.byName[name]
	if !ok {
		return nil, fmt.Errorf("provider: unknown profile %q (have %s)", name, strings.Join(s.Names(), ", "))
	}
	return p, nil
}

// Origin says where the named profile came from: "embedded:profiles/x.yaml"
// or the file that overrode it.
func (s *Set) Origin(name string) string { return s.origin[name] }

// Names returns the profiles' names, sorted.
func (s *Set) Names() []string {
	names := make([]string, 0, len(s.byName))
	for n := range s.byName {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Registry holds the current Set of a long-running program (a server) and
// swaps it on Reload: a malformed file is refused with its error and the
// profiles the registry had are kept. It is safe for concurrent use; the
// zero value holds no set, use NewRegistry.
type Registry struct {
	cur atomic.Pointer[Set]
}

// NewRegistry returns a registry holding s.
func NewRegistry(s *Set) *Registry {
	r := &Registry{}
	r.cur.Store(s)
	return r
}

// Set returns the current set.
func (r *Registry) Set() *Set { return r.cur.Load() }

// Swap makes s the current set.
func (r *Registry) Swap(s *Set) { r.cur.Store(s) }

// Reload loads the embedded profiles overridden by files and, if every file
// parses, makes them current. On error the current set stays.
func (r *Registry) Reload(files ...string) error {
	s, err := Load(files...)
	if err != nil {
		return err
	}
	r.cur.Store(s)
	return nil
}
