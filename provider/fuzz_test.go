package provider

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicerl/sluice/signal"
	"github.com/sluicerl/sluice/store"
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

// FuzzSettle: whatever a provider answers (any status, header values and
// body), settling it under every profile never panics, and the key's
// state stays usable: a later Reserve answers without error.
func FuzzSettle(f *testing.F) {
	f.Add(200, "", "", []byte(`{"extensions":{"cost":{"requestedQueryCost":10,"actualQueryCost":3,"throttleStatus":{"maximumAvailable":1000,"currentlyAvailable":990,"restoreRate":50}}}}`))
	f.Add(429, "2.0", "40/40", []byte(nil))
	f.Add(418, "120", "", []byte(`{"code":-1003}`))
	f.Add(200, "", "", []byte(`{"errors":[{"extensions":{"code":"THROTTLED"}}],"extensions":{"cost":{"requestedQueryCost":1e300,"throttleStatus":{"maximumAvailable":1e308,"currentlyAvailable":-1,"restoreRate":1e-300}}}}`))
	f.Add(403, "Wed, 21 Oct 2015 07:28:00 GMT", "99999999999/1", []byte(`[]`))
	set, err := Embedded()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, status int, retryAfter, used string, body []byte) {
		ctx := context.Background()
		for _, n := range set.Names() {
			p, _ := set.Get(n)
			clk := &fixedNow{t: t0}
			rt, err := NewRuntime(Config{Profile: p, Now: clk.now})
			if err != nil {
				t.Fatal(err)
			}
			call := Call{Key: "shop", Keys: map[string]string{"ip": "1.2.3.4", "account": "a", "token": "t", "host": "h.example"}, Method: "GET", Path: "/x", Cost: 10}
			tk, err := rt.Reserve(ctx, call)
			if err != nil {
				t.Fatalf("%s: %v", n, err)
			}
			h := http.Header{}
			h.Set("Retry-After", retryAfter)
			h.Set("X-Shopify-Shop-Api-Call-Limit", used)
			h.Set("X-Mbx-Used-Weight-1m", used)
			h.Set("X-Mbx-Order-Count-10s", used)
			h.Set("X-Ratelimit-Limit", used)
			h.Set("X-Ratelimit-Remaining", retryAfter)
			h.Set("Ratelimit-Policy", used)
			if tk.OK {
				if _, err := rt.Settle(ctx, tk, signal.Response{Status: status, Header: h, Body: body}); err != nil && !errors.Is(err, store.ErrOutOfRange) {
					t.Fatalf("%s: settle: %v", n, err)
				}
			}
			clk.advance(time.Hour)
			if _, err := rt.Reserve(ctx, call); err != nil {
				t.Fatalf("%s: reserve after settle: %v", n, err)
			}
		}
	})
}
