package server

import (
	"fmt"
	"net/http"

	"github.com/sluicerl/sluice/auth"
	"github.com/sluicerl/sluice/provider"
)

// Provider profiles (package provider) over HTTP: GET /v1/providers lists
// the profiles the server holds (the embedded ones overridden by `sluice
// serve --profiles`), GET /v1/providers/{name} shows one, and the outbound
// endpoints' "profile" field applies one (outbound.go). The set is read
// from Config.Providers at each request, so a reload that swaps it (the
// CLI's) is seen by the next request.

// Provider routes, also route labels of sluice_http_requests_total.
const (
	routeProviders = "/v1/providers"
	routeProvider  = "/v1/providers/{name}"
)

func (s *Server) providerRoutes() []route {
	if s.providers == nil {
		return nil
	}
	return []route{
		{http.MethodGet, routeProviders, s.listProviders, auth.Read},
		{http.MethodGet, routeProvider, s.showProvider, auth.Read},
	}
}

// registryProfiles resolves outbound requests' "profile" field from a
// provider.Registry.
type registryProfiles struct{ reg *provider.Registry }

func (r registryProfiles) OutboundKey(profile, key string) (string, error) {
	p, ok := r.reg.Set().Get(profile)
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrUnknownProfile, profile)
	}
	return p.NormalizeKey(key)
}

type providerSummaryJSON struct {
	Name        string   `json:"name"`
	Revision    string   `json:"revision"`
	Description string   `json:"description"`
	Origin      string   `json:"origin"`
	Scopes      []string `json:"scopes"`
}

type providerLimitJSON struct {
	Name      string `json:"name"`
	Scope     string `json:"scope"`
	Unit      string `json:"unit,omitempty"`
	Algorithm string `json:"algorithm"`
	Capacity  int64  `json:"capacity"`
	Rate      int64  `json:"rate,omitempty"`
	PerMs     int64  `json:"perMs,omitempty"`
	WindowMs  int64  `json:"windowMs,omitempty"`
	Charge    string `json:"charge"`
	Resource  string `json:"resource,omitempty"`
	Sync      string `json:"sync,omitempty"`
}

type providerLeaseJSON struct {
	Name    string `json:"name"`
	Scope   string `json:"scope"`
	Permits int64  `json:"permits"`
	TTLMs   int64  `json:"ttlMs"`
}

type providerRouteJSON struct {
	Method   string           `json:"method"`
	Path     string           `json:"path"`
	Resource string           `json:"resource,omitempty"`
	Costs    map[string]int64 `json:"costs,omitempty"`
}

type providerJSON struct {
	providerSummaryJSON
	Docs            []string            `json:"docs"`
	Key             string              `json:"key"`
	ResourceHeader  string              `json:"resourceHeader,omitempty"`
	DefaultResource string              `json:"defaultResource,omitempty"`
	Limits          []providerLimitJSON `json:"limits"`
	Leases          []providerLeaseJSON `json:"leases"`
	Routes          []providerRouteJSON `json:"routes"`
}

func summary(set *provider.Set, p *provider.Profile) providerSummaryJSON {
	return providerSummaryJSON{Name: p.Name, Revision: p.Revision, Description: p.Description,
		Origin: set.Origin(p.Name), Scopes: append([]string{}, p.Scopes()...)}
}

func (s *Server) listProviders(w http.ResponseWriter, _ *http.Request) {
	set := s.providers.Set()
	out := struct {
		Providers []providerSummaryJSON `json:"providers"`
	}{Providers: []providerSummaryJSON{}}
	for _, n := range set.Names() {
		p, _ := set.Get(n)
		out.Providers = append(out.Providers, summary(set, p))
	}
	writeJSON(w, http.StatusOK, contentJSON, out)
}

func (s *Server) showProvider(w http.ResponseWriter, r *http.Request) {
	set := s.providers.Set()
	name := r.PathValue("name")
	p, ok := set.Get(name)
	if !ok {
		writeProblem(w, &problem{Type: TypeUnknownProfile, Title: "Unknown provider profile", Status: http.StatusNotFound,
			Detail: fmt.Sprintf("this server holds no profile %q (GET /v1/providers lists them)", truncate(name, 64))})
		return
	}
	out := providerJSON{providerSummaryJSON: summary(set, p), Docs: append([]string{}, p.Docs...), Key: string(p.Key),
		ResourceHeader: p.ResourceHeader, DefaultResource: p.DefaultResource,
		Limits: []providerLimitJSON{}, Leases: []providerLeaseJSON{}, Routes: []providerRouteJSON{}}
	for _, l := range p.Limits {
		lj := providerLimitJSON{Name: l.Name, Scope: l.Scope, Unit: l.Unit, Algorithm: string(l.Algorithm), Capacity: l.Capacity,
			Rate: l.Rate, PerMs: l.Per.Milliseconds(), WindowMs: l.Window.Milliseconds(), Charge: l.Charge, Resource: l.Resource}
		if l.Sync != nil {
			lj.Sync = l.Sync.Source
		}
		out.Limits = append(out.Limits, lj)
	}
	for _, l := range p.Leases {
		out.Leases = append(out.Leases, providerLeaseJSON{Name: l.Name, Scope: l.Scope, Permits: l.PermitsFor(""), TTLMs: l.TTL.Milliseconds()})
	}
	for _, rt := range p.Routes {
		out.Routes = append(out.Routes, providerRouteJSON{Method: rt.Method, Path: rt.Path, Resource: rt.Resource, Costs: rt.Costs})
	}
	writeJSON(w, http.StatusOK, contentJSON, out)
}
