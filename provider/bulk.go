package provider

import (
	"fmt"

	"github.com/sluicerl/sluice/lease"
)

// LeaseParams returns the lease.Params of the profile's lease name for key
// under API version apiVersion (empty: the latest): the permits the
// version allows (Shopify bulk queries: 1 before 2026-01, 5 from it), the
// lease's TTL, and the key normalized as the profile's buckets and job
// groups normalize it. Hold it with a lease.Leaser over the store the fleet
// shares: renew and release are the holder's alone (fencing tokens), and
// other keys are independent.
//
// holder names the holder (empty: a random one per acquire).
func (p *Profile) LeaseParams(name, key, apiVersion, holder string) (lease.Params, error) {
	l, ok := p.Lease(name)
	if !ok {
		return lease.Params{}, fmt.Errorf("provider %s: unknown lease %q", p.Name, name)
	}
	if apiVersion != "" && !versionRE.MatchString(apiVersion) {
		return lease.Params{}, fmt.Errorf("provider %s: API version %q: want YYYY-MM or unstable", p.Name, apiVersion)
	}
	k, err := p.NormalizeKey(key)
	if err != nil {
		return lease.Params{}, err
	}
	return lease.Params{Name: p.Name + "." + l.Name, Key: k, Permits: l.PermitsFor(apiVersion), TTL: l.TTL, Holder: holder}, nil
}
