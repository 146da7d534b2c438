package sim

import "math"

func floatBits(f float64) uint64 { return math.Float64bits(f) }
func floatFrom(b uint64) float64 { return math.Float64frombits(b) }

// SettleAllowance is how long, in seconds, the figures leave a client to
// converge after the start and to settle after a limit change (issue 5:
// 10 s each): those seconds count for ConvergeS and SettleS, not for the
// steady ratios.
const SettleAllowance = 10

// Summary is a run's figures (issue 5), a plain value. Seconds are whole
// seconds since the start; -1 means "never" or "not applicable".
type Summary struct {
	// ConvergeS is the first second from which goodput over two seconds
	// is within 5% of the limit (at least 0.95 of it).
	ConvergeS int `json:"converge_s"`
	// GoodputRatio is goodput over the limit across the steady seconds:
	// every second except the SettleAllowance seconds after the start and
	// after each limit change, and the last (partial) second. A client
	// that has not converged within the allowance pays for it here.
	GoodputRatio float64 `json:"goodput_ratio"`
	// ThrottleRatio is throttle responses over attempts in the steady
	// seconds.
	ThrottleRatio float64 `json:"throttle_ratio"`
	// SettleS is, for the first limit change, how many seconds after it the
	// throttle share over the rest of that segment falls under 1%.
	SettleS int `json:"settle_s"`
	// ReconvergeS is, for the first limit change, how many seconds after
	// it the client is back: the first second from which goodput over two
	// seconds is at least 0.95 of the (new) limit and the throttle share
	// over the rest of that segment is under 1%.
	ReconvergeS int `json:"reconverge_s"`
	// Bans counts 418 responses over the whole run.
	Bans int64 `json:"bans"`
	// Ops, Offered, Throttles and Retries are whole-run totals; RetryRatio
	// is Retries / Ops.
	Ops        int64   `json:"ops"`
	Offered    int64   `json:"offered"`
	Throttles  int64   `json:"throttles"`
	Retries    int64   `json:"retries"`
	RetryRatio float64 `json:"retry_ratio"`
	// MeanGoodput is the mean goodput per second over the whole run.
	MeanGoodput float64 `json:"mean_goodput"`
}

// Summarize computes the figures of a run. Figures relative to the limit
// are -1 when the seconds carry no limit.
func Summarize(r *Result) Summary {
	s := Summary{ConvergeS: -1, GoodputRatio: -1, ThrottleRatio: -1, SettleS: -1, ReconvergeS: -1}
	secs := r.Seconds
	n := len(secs)
	for _, x := range secs {
		s.Ops += x.Goodput + x.Errors
		s.Offered += x.Offered
		s.Throttles += x.Throttles
		s.Retries += x.Retries
		s.Bans += x.Bans
		s.MeanGoodput += float64(x.Goodput)
	}
	if n > 0 {
		s.MeanGoodput /= float64(n)
	}
	if s.Ops > 0 {
		s.RetryRatio = float64(s.Retries) / float64(s.Ops)
	}
	if n == 0 || secs[0].Limit <= 0 {
		return s
	}
	var changes []int
	for i := 1; i < n; i++ {
		if secs[i].Limit != secs[i-1].Limit {
			changes = append(changes, i)
		}
	}
	for i := 0; i+1 < n-1; i++ {
		g := float64(secs[i].Goodput + secs[i+1].Goodput)
		l := secs[i].Limit + secs[i+1].Limit
		if g >= 0.95*l {
			s.ConvergeS = i
			break
		}
	}
	{
		var good, limit float64
		var thr, off int64
		for i := SettleAllowance; i < n-1; i++ {
			if settling(i, changes) {
				continue
			}
			good += float64(secs[i].Goodput)
			limit += secs[i].Limit
			thr += secs[i].Throttles
			off += secs[i].Offered
		}
		if limit > 0 {
			s.GoodputRatio = good / limit
		}
		if off > 0 {
			s.ThrottleRatio = float64(thr) / float64(off)
		}
	}
	if len(changes) > 0 {
		c := changes[0]
		end := n - 1
		if len(changes) > 1 {
			end = changes[1]
		}
		for k := c; k < end; k++ {
			var thr, off int64
			for i := k; i < end; i++ {
				thr += secs[i].Throttles
				off += secs[i].Offered
			}
			if off == 0 || float64(thr) < 0.01*float64(off) {
				s.SettleS = k - c
				break
			}
		}
		for k := max(c, c+s.SettleS); s.SettleS >= 0 && k+1 < end; k++ {
			if float64(secs[k].Goodput+secs[k+1].Goodput) >= 0.95*(secs[k].Limit+secs[k+1].Limit) {
				s.ReconvergeS = k - c
				break
			}
		}
	}
	return s
}

func settling(i int, changes []int) bool {
	for _, c := range changes {
		if i >= c && i < c+SettleAllowance {
			return true
		}
	}
	return false
}
