package signal

import (
	"net/http"
	"strings"
)

// BinanceInterval parses the interval suffix of a Binance usage header,
// (intervalNum)(intervalLetter) as in "1M", "10S", "1D" (case-insensitive:
// net/http canonicalizes "1M" to "1m"), into microseconds. Letters are S,
// M (minute), H and D.
func BinanceInterval(s string) (int64, bool) {
	if len(s) < 2 || len(s) > 6 {
		return 0, false
	}
	n, ok := digits(s[:len(s)-1])
	if !ok || n == 0 {
		return 0, false
	}
	var unit int64
	switch s[len(s)-1] {
	case 's', 'S':
		unit = sec
	case 'm', 'M':
		unit = 60 * sec
	case 'h', 'H':
		unit = 3600 * sec
	case 'd', 'D':
		unit = 86400 * sec
	default:
		return 0, false
	}
	return n * unit, true
}

// Canonical prefixes of Binance's usage headers as net/http keys them.
const (
	binanceWeight = "X-Mbx-Used-Weight"
	binanceOrders = "X-Mbx-Order-Count"
)

// binance reads X-MBX-USED-WEIGHT-(interval) and X-MBX-ORDER-COUNT-
// (interval): units used in the current window of that length. The bare
// X-MBX-USED-WEIGHT (no interval, an older form) is read as a window of
// unknown length. Binance does not send the limits themselves (they are in
// exchangeInfo), so these policies have Used but no Limit or Remaining.
func binance(rep *Report, h http.Header) {
	// Map order is random: keep the first MaxPolicies by name, then
	// window, so that the same headers always give the same Report,
	// however many there are.
	var kept [MaxPolicies]Policy
	n := 0
	for k, v := range h {
		if len(v) == 0 || len(k) < len(binanceWeight) || (k[:len(binanceWeight)] != binanceWeight && k[:len(binanceOrders)] != binanceOrders) {
			continue
		}
		name := "weight"
		if k[:len(binanceOrders)] == binanceOrders {
			name = "orders"
		}
		rest := k[len(binanceWeight):]
		pol := Policy{Name: name, Source: SourceBinance}
		if rest != "" {
			iv, ok := strings.CutPrefix(rest, "-")
			if !ok {
				continue
			}
			w, ok := BinanceInterval(iv)
			if !ok {
				continue
			}
			pol.Window, pol.Known = w, FieldWindow
		}
		used, ok := digits(trimOWS(v[0]))
		if !ok {
			continue
		}
		pol.Used, pol.Known = used, pol.Known|FieldUsed
		rep.Sources |= SourceBinance
		if n == len(kept) {
			if !binanceLess(pol, kept[n-1]) {
				continue
			}
			n--
		}
		j := n
		for ; j > 0 && binanceLess(pol, kept[j-1]); j-- {
			kept[j] = kept[j-1]
		}
		kept[j] = pol
		n++
	}
	for _, pol := range kept[:n] {
		rep.addPolicy(pol)
	}
}

func binanceLess(a, b Policy) bool {
	if a.Name != b.Name {
		return a.Name > b.Name // "weight" before "orders"
	}
	if a.Window != b.Window {
		return a.Window < b.Window
	}
	return a.Used > b.Used // "1m" and "1M" both sent: the busier first
}
