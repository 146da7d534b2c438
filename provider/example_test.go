package provider_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicerl/sluice/provider"
	"github.com/sluicerl/sluice/signal"
)

// A Shopify GraphQL query reserves its requested cost, is refunded the
// difference to its actual cost, and a query the bucket cannot hold is not
// sent: the ticket says how long until it can be. (Config.Now pins the
// store's clock so that the output is the same on every run; programs
// leave it nil.)
func ExampleRuntime_Reserve() {
	ctx := context.Background()
	set, _ := provider.Embedded()
	p, _ := set.Get("shopify-graphql")
	at := time.Date(2026, 1, 6, 12, 0, 0, 0, time.UTC)
	rt, _ := provider.NewRuntime(provider.Config{Profile: p, Now: func() time.Time { return at }})

	t, _ := rt.Reserve(ctx, provider.Call{Key: "https://My-Shop.myshopify.com/admin", Cost: 100})
	fmt.Println(t.OK, t.Key)
	body := []byte(`{"data":{},"extensions":{"cost":{"requestedQueryCost":100,"actualQueryCost":30,
		"throttleStatus":{"maximumAvailable":1000,"currentlyAvailable":970,"restoreRate":50}}}}`)
	o, _ := rt.Settle(ctx, t, signal.Response{Status: 200, Body: body})
	fmt.Println(o.Kind, "refunded", o.Refunded)

	t, _ = rt.Reserve(ctx, provider.Call{Key: "my-shop", Cost: 980})
	fmt.Println(t.OK, t.Reason, t.Delay)

	_, err := rt.Reserve(ctx, provider.Call{Key: "my-shop", Cost: 1500})
	fmt.Println(err != nil)
	// Output:
	// true my-shop.myshopify.com
	// ok refunded 70
	// false points 200ms
	// true
}
