package provider

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/sluicerl/sluice/store"
)

// ErrInvalidKey is wrapped by every key normalization error: the caller's
// key can name no state of the provider.
var ErrInvalidKey = errors.New("provider: invalid key")

// myshopify is the domain every Shopify shop has, whatever its custom
// domains.
const myshopify = ".myshopify.com"

// NormalizeShop returns the canonical id of a Shopify shop: its
// myshopify.com domain, lower-cased. It accepts the shop's name
// ("My-Shop"), its domain in any case ("My-Shop.myshopify.com"), a URL
// ("https://my-shop.myshopify.com/admin/api/2026-01/graphql.json") and the
// admin URL ("https://admin.shopify.com/store/my-shop"). The same shop
// always gives the same id, so the cost bucket, the bulk-operation lease and
// the job group key of one shop are one budget. A custom domain
// ("shop.example.com") is refused: only Shopify knows which shop it is.
func NormalizeShop(s string) (string, error) {
	in := s
	s = strings.ToLower(strings.TrimSpace(s))
	if rest, ok := strings.CutPrefix(s, "https://"); ok {
		s = rest
	} else if rest, ok := strings.CutPrefix(s, "http://"); ok {
		s = rest
	}
	if rest, ok := strings.CutPrefix(s, "admin.shopify.com/store/"); ok {
		s, _, _ = strings.Cut(rest, "/")
	}
	if i := strings.IndexAny(s, "/?#"); i >= 0 {
		s = s[:i]
	}
	if h, port, err := net.SplitHostPort(s); err == nil {
		if port != "443" && port != "80" {
			return "", fmt.Errorf("%w: shop %q: a shop domain has no port %s", ErrInvalidKey, in, port)
		}
		s = h
	}
	s = strings.TrimSuffix(s, ".")
	name, ok := strings.CutSuffix(s, myshopify)
	if !ok {
		if strings.Contains(s, ".") {
			return "", fmt.Errorf("%w: shop %q: a custom domain; give the shop's myshopify.com domain", ErrInvalidKey, in)
		}
		name = s
	}
	if name == "" {
		return "", fmt.Errorf("%w: shop %q: empty shop name", ErrInvalidKey, in)
	}
	if len(name) > 100 {
		return "", fmt.Errorf("%w: shop %.40q...: a shop name is at most 100 characters", ErrInvalidKey, in)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0) {
			return "", fmt.Errorf("%w: shop %q: a shop name has only letters, digits and inner hyphens", ErrInvalidKey, in)
		}
	}
	return name + myshopify, nil
}

// Normalize applies the rule to key. Every result also passes the store's
// identifier rule (store.CheckKey).
func (r KeyRule) Normalize(key string) (string, error) {
	var out string
	switch r {
	case KeyShopifyShop:
		k, err := NormalizeShop(key)
		if err != nil {
			return "", err
		}
		out = k
	case KeyLower:
		out = strings.ToLower(strings.TrimSpace(key))
	case KeyHost:
		k, err := normalizeHost(key)
		if err != nil {
			return "", err
		}
		out = k
	case KeyExact, "":
		out = key
	default:
		return "", fmt.Errorf("%w: unknown key rule %q", ErrInvalidKey, string(r))
	}
	if out == "" {
		return "", fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if err := store.CheckKey(out); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidKey, err)
	}
	return out, nil
}

// normalizeHost reduces a URL or a host to its lower-cased host, dropping
// the scheme's default port.
func normalizeHost(s string) (string, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("%w: %q is neither a host nor a URL", ErrInvalidKey, s)
	}
	host := strings.ToLower(u.Host)
	h, port, err := net.SplitHostPort(host)
	if err != nil {
		return strings.TrimSuffix(host, ":"), nil
	}
	scheme := strings.ToLower(u.Scheme)
	if port == "" || port == "443" && (scheme == "https" || scheme == "wss") || port == "80" && (scheme == "http" || scheme == "ws") {
		if strings.Contains(h, ":") {
			return "[" + h + "]", nil
		}
		return h, nil
	}
	return host, nil
}

// GroupKey returns the job group key (job.Config's group) of key under
// profile p. It is the normalized key itself: a job group, the profile's
// buckets and its leases name one shop (or account) by one id, as seed 004
// requires (the bulk lock's shop id must match the group id).
func GroupKey(p *Profile, key string) (string, error) { return p.NormalizeKey(key) }
