package provider

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNormalizeShop(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"my-shop", "My-Shop", "  my-shop ", "my-shop.myshopify.com", "MY-SHOP.MyShopify.com",
		"https://my-shop.myshopify.com", "http://My-Shop.myshopify.com/admin/api/2026-01/graphql.json",
		"https://my-shop.myshopify.com:443/", "my-shop.myshopify.com.", "https://admin.shopify.com/store/my-shop",
		"https://admin.shopify.com/store/My-Shop/products?x=1", "my-shop.myshopify.com?x#y",
	} {
		got, err := NormalizeShop(in)
		require.NoError(t, err, in)
		require.Equal(t, "my-shop.myshopify.com", got, in)
	}
	for _, in := range []string{"", "  ", "https://", "shop.example.com", "my shop", "-shop", "my_shop", "my-shop.myshopify.com:8443",
		".myshopify.com", "a\x00b", "ünï"} {
		_, err := NormalizeShop(in)
		require.Error(t, err, in)
		require.True(t, errors.Is(err, ErrInvalidKey), in)
	}
}

// TestOneShopOneKey: every profile of Shopify normalizes a shop the same
// way, so its cost bucket, its REST bucket, its bulk leases and its job
// group are one shop.
func TestOneShopOneKey(t *testing.T) {
	t.Parallel()
	s, err := Embedded()
	require.NoError(t, err)
	for _, n := range []string{"shopify-graphql", "shopify-rest", "shopify-bulk"} {
		p, _ := s.Get(n)
		a, err := p.NormalizeKey("Shop.myshopify.com")
		require.NoError(t, err)
		b, err := p.NormalizeKey("shop.myshopify.com")
		require.NoError(t, err)
		require.Equal(t, a, b, n)
		require.Equal(t, "shop.myshopify.com", a)
		g, err := GroupKey(p, "https://SHOP.myshopify.com/admin")
		require.NoError(t, err)
		require.Equal(t, a, g)
	}
}

func TestKeyRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rule    KeyRule
		in, out string
	}{
		{KeyExact, "Acct-1", "Acct-1"},
		{KeyLower, " Acct-1 ", "acct-1"},
		{KeyHost, "https://API.example.com:443/v1", "api.example.com"},
		{KeyHost, "http://api.example.com:8080", "api.example.com:8080"},
		{KeyHost, "API.example.com", "api.example.com"},
	} {
		got, err := tc.rule.Normalize(tc.in)
		require.NoError(t, err)
		require.Equal(t, tc.out, got)
	}
	for _, tc := range []struct {
		rule KeyRule
		in   string
	}{{KeyExact, ""}, {KeyLower, "   "}, {KeyExact, "a\nb"}, {KeyHost, "http://"}, {"weird", "x"}} {
		_, err := tc.rule.Normalize(tc.in)
		require.ErrorIs(t, err, ErrInvalidKey, "%s %q", tc.rule, tc.in)
	}
}
