package provider

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
)

// FuzzParse: any input either parses into a profile whose every limit the
// store accepts, or is refused with an *Error naming the file; never a
// panic.
func FuzzParse(f *testing.F) {
	entries, _ := fs.Glob(embedded, "profiles/*.yaml")
	for _, e := range entries {
		data, _ := embedded.ReadFile(e)
		f.Add(data)
	}
	f.Add([]byte("schema: 1\nname: x\nrevision: r\nlimits: [{name: a, scope: k, algorithm: fixed_window, capacity: 1, window: 1s}]\n"))
	f.Add([]byte("limits: {a: 1}\n"))
	f.Add([]byte("&a [*a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("fuzz.yaml", data)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || pe.File != "fuzz.yaml" {
				t.Fatalf("error %v (%T) does not name the file", err, err)
			}
			if !strings.Contains(err.Error(), "fuzz.yaml") {
				t.Fatalf("message %q does not name the file", err)
			}
			return
		}
		for _, l := range p.Limits {
			if err := l.StoreLimit(l.Name).Validate(); err != nil {
				t.Fatalf("limit %s passed the loader but not the store: %v", l.Name, err)
			}
		}
		for _, l := range p.Leases {
			if l.PermitsFor("") < 1 {
				t.Fatalf("lease %s has no permit", l.Name)
			}
		}
	})
}

func FuzzNormalizeShop(f *testing.F) {
	for _, s := range []string{"my-shop", "https://admin.shopify.com/store/x", "a.myshopify.com:443", "x.example.com"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := NormalizeShop(s)
		if err != nil {
			return
		}
		again, err := NormalizeShop(k)
		if err != nil || again != k {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", s, k, again, err)
		}
		if !strings.HasSuffix(k, myshopify) || strings.ToLower(k) != k {
			t.Fatalf("%q -> %q is not a lower-case myshopify domain", s, k)
		}
	})
}
