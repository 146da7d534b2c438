// Package outbound keeps a program's calls to third-party APIs inside
// limits it does not know: an http.RoundTripper (and a Do form for calls
// that are not HTTP) that paces, adapts, breaks and retries per upstream
// key.
//
// Every call goes through the layers of seed 002 (D6), outermost first
// (call.go composes them; bulkhead.go, pacing.go and policy.go hold the
// layers, adaptive.go the key's controller, fleet.go what the fleet shares
// through the store, registry.go the keys):
//
//  1. bulkhead: at most Config.MaxConcurrent calls in flight per key;
//  2. timeout: Config.Timeout bounds the whole call, retries included;
//  3. rate limiter: every attempt takes its turn from a GCRA limit at the
//     key's adapted rate and passes the key's fleet-wide pause, both in
//     one all-or-nothing call to a store.RateStore. Each process paces its
//     own share by default; with Config.SharedRate the processes sharing
//     the store pace on one GCRA at one adapted rate. A key found paused
//     again as soon as the fleet resumed from a pause (a provider whose
//     bucket holds fewer calls than the processes send at once) also
//     spaces the fleet's calls, for five minutes: each takes a turn of a
//     GCRA the fleet shares, at 1.05 times the fleet's rate (the
//     process's own over its share);
//  4. circuit breaker: an open breaker fails the call at once, without
//     consulting the retry budget (breaker.ErrOpen);
//  5. retry: full-jitter backoff with Retry-After as its floor, bounded by
//     a ratio retry budget (retry.ErrBudgetExhausted, never mistaken for a
//     provider's throttle);
//  6. the request.
//
// Retries are inside the breaker, as D6 says, but each retry takes its turn
// from the rate limiter again: a retry is an attempt the provider counts,
// so it is paced like one.
//
// Every response is read by package signal into one report. The report
// drives the key's AIMD controller (package aimd: additive increase on fast
// successes, multiplicative decrease on throttles and slow responses,
// errors never raise the rate, a conservative start) and syncs the key's
// quota in the store: a Retry-After, a ban or an exhausted quota pauses
// the key for every process that shares the store, not just the worker
// that saw it, and every process that finds the key paused slows its own
// rate down once for the episode, so the fleet backs off as one; a ban (a
// 418) is marked as one in the store, and every process that finds the key
// paused by it starts over, as the process banned does. A refusal's pause
// lasts 150 ms at least (an HTTP-date's excepted): a provider that states
// the milliseconds to its next token asks for a pause over before the
// other processes look, and they would neither wait nor slow down. When a
// refusal comes late in a clock second (a window of a second aligned to
// the clock, spent), each process adds to the store the calls it had
// served in that second, and reads the fleet's sum back once the pause is
// over: the window's count is the fleet's, while each process's share of
// it moves from one episode to the next (aimd's FleetCount). A provider's
// queue is the fleet's too: every five clock seconds each process adds the
// calls answered in one second to a count in the store and reads the sum
// two seconds later, so that its controller counts a queue at the fleet's
// rate, its own over its share (aimd's FleetShare), and a fleet of N
// processes is slowed once the queue holds a call, not N. A
// sustainable rate the provider reports (a quota over its
// window, a cost bucket's restore rate) caps the adapted rate. A window
// budget the provider never states but whose use it reports (Binance's
// X-MBX-USED-WEIGHT-(interval)) is learned: a refusal while the header says
// W means the budget is W, a call's weight is the smallest step between
// reports, and the key is then paced, fleet-wide, window by window (the
// windows aligned to the clock, as the provider's are): 98 % of the budget
// by each window's reset, faster (up to 3 times the budget's pace, and no
// more than 3 calls a latency) when a pause took the window's start, and
// not at all once the window's share is spent. A success reporting more
// than the budget raises it at once; to find a raised limit, every 5 s
// (further apart when a failed probe would cost more than 0.5 % of the
// budget: it costs the part of the next window its Retry-After takes) a
// window that follows one spent to the budget probes: it spends the
// budget, then sends one call at a time beyond it, so that an unchanged
// limit costs one refusal with no call in flight behind it, and only while
// that refusal's pause would leave the next window time for its budget
// (whether the window before was spent counts the other processes' calls
// after this one's last report of it, so that the fleet probes together). The process
// that learns a budget writes it to the store; the others take it up when
// they find the key paused. Until a budget is known, a window's calls
// beyond the most any earlier window used leave one at a time too, so that
// the refusal that shows the budget has no call in flight behind it (a
// provider counts those towards a ban). A window of a minute (X-MBX-USED-WEIGHT-1M,
// Binance's REQUEST_WEIGHT) is not left to the slow start meanwhile (issue
// 18: it grew for seconds with no refusal to stop it, spent the minute's
// budget at 6 times its pace, and the calls in flight behind the first
// refusal earned a ban): from its first report it assumes the budget
// Binance documents for the Spot API, 6000 weight a minute (the embedded
// binance profile's too), paced at the ordinary pace, never faster while
// it is an assumption, and counting a call as 1 weight until a step
// between two reports shows its weight. It is an assumption, not a
// learned budget: the fleet is not told of it, and a refusal under it (a
// lower limit, such as USD-M futures' 2400) or a success above it sets the
// budget as it would with none. Other windows assume nothing. Whatever
// the budget, a window's usage at it is a hard stop: the first refusal,
// also one after the limit fell below what the window used already, stops
// the key until the window's reset, and a turn booked before it is not
// taken.
// A leaky bucket that reports its level but not its leak (Shopify REST's
// X-Shopify-Shop-Api-Call-Limit: 32/40, the fleet's calls in a bucket of
// 40 leaking at a rate the plan sets, and a full bucket refused with a
// Retry-After of 2 s) is paced by its level, fleet-wide, as soon as an
// answer shows it: a PI controller holds the level at half the bucket (its
// integral is the leak as far as the level tells, its bandwidth at most 3
// radians a second and less when the key's answers come far apart), so
// that the fleet is served at exactly the leak, whatever the leak's
// estimate errs by, and follows a leak that halves or doubles within a
// second or two; a call that the latest level, less the leak since, the
// calls in flight and a margin of 2 would not leave room for waits
// (a hard stop, not the refusal that pauses the fleet 2 s); the level
// after a stop or a pause corrects the leak's estimate; and an empty
// bucket raises it only while the pace holds calls back. Within
// [Floor, Ceiling] of the aimd config, which then sets no rate for the key.
// Config.SharedRate also keeps the adapted rate itself in the store, so
// that a fleet adapts as one.
//
// A rate the provider states (IETF RateLimit-Policy's quota per window,
// paced at 98 % of it; X-RateLimit-* with no window as 98 % of the limit
// over the longest time to a reset seen, in whole seconds, or what remains
// over the least the time to the reset may be when that is less (a reset
// in whole seconds from now is rounded: "1" on a window of a second says
// nothing of what remains); a cost bucket's restore rate; a
// learned weight budget) is paced at once from the first answer, with no
// slow start towards it. Latency means the provider's time: for HTTP, from
// the request written to the first response byte; and a process whose
// calls leave their turns late (a starved machine: its pacing timers fire
// late, or its store stalls and the calls booked in the stall leave
// together; that delay an eighth of the latency or more) does not judge
// the provider by latency at all, only by throttles, so that it does not
// slow itself down with no throttle in sight. Nor does a stalling store
// send a bunch: with strict pacing (Config.Burst 1) a process's attempts
// on a key leave at least half a pacing interval apart, however late the
// store's answers came, and a whole interval apart once their turns passed
// more than two intervals (and 50 ms) before.
//
// Acquire and Permit.Report are the same layers in two steps (permit.go),
// for callers that make the request themselves, such as workers in other
// languages behind the server's /v1/outbound endpoints: Acquire runs the
// bulkhead, the rate limiter and the breaker, and answers a *WaitError
// (how long to wait) rather than wait past AcquireOpts.MaxWait, or an
// *OpenError while the breaker is open; Report reads the attempt's status,
// headers and body like a response, feeds the same controller, breaker,
// retry budget and fleet-wide pause, and advises whether to retry.
//
// Keys are per host (HostKey: lowercased, default ports dropped), or per
// provider profile (Config.Profiles maps hosts to a profile name). Each
// key's state lives in one of 64 independently locked shards, and each
// layer's part of it guards itself, so calls to different keys share no
// lock. A key idle for Config.IdleTTL is dropped by a sweep on the
// client's clock (its pacing and pauses live on in the store). Snapshot
// returns every key's state (seed 001 section 11) and Config.Metrics
// registers Prometheus metrics labelled by profile or host, never by a
// caller's raw key unless Config.KeyLabels opts in.
package outbound
