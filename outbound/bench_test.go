package outbound_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicerl/sluice/aimd"
	"github.com/sluicerl/sluice/outbound"
)

// canned answers 200 with nothing, as fast as it can.
type canned struct{ h http.Header }

func (c canned) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: c.h, Body: http.NoBody, Request: req}, nil
}

// BenchmarkRoundTrip is the client's own cost per call: pacing (one
// TakeAll on memstore), the breaker, the signal parse, AIMD and the retry
// budget, at a rate high enough never to wait.
func BenchmarkRoundTrip(b *testing.B) {
	c, err := outbound.New(outbound.Config{Base: canned{h: http.Header{}}, Burst: 1 << 20,
		AIMD: aimd.Config{Start: 1e6, Floor: 1e6, Ceiling: 1e6, IgnoreLatency: true}, MaxReserve: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "http://api.test/", nil)
	req.RequestURI = ""
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.RoundTrip(req)
			if err != nil {
				b.Fatal(err)
			}
			_ = resp.Body.Close()
		}
	})
}

// BenchmarkRoundTripManyKeys is BenchmarkRoundTrip with every goroutine on
// keys of its own: calls to different keys meet on no client-wide lock.
func BenchmarkRoundTripManyKeys(b *testing.B) {
	c, err := outbound.New(outbound.Config{Base: canned{h: http.Header{}}, Burst: 1 << 20,
		AIMD: aimd.Config{Start: 1e6, Floor: 1e6, Ceiling: 1e6, IgnoreLatency: true}, MaxReserve: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		reqs := make([]*http.Request, 16)
		for i := range reqs {
			reqs[i] = httptest.NewRequest(http.MethodGet, fmt.Sprintf("http://api%d.test/", next.Add(1)), nil)
			reqs[i].RequestURI = ""
		}
		for i := 0; pb.Next(); i++ {
			resp, err := c.RoundTrip(reqs[i%len(reqs)])
			if err != nil {
				b.Fatal(err)
			}
			_ = resp.Body.Close()
		}
	})
}
