// Package aimd is an adaptive rate controller: additive increase,
// multiplicative decrease (AIMD) of a key's request rate from the outcomes
// of its calls, as pure functions of (state, now, sample).
//
// The rate starts conservatively (Config.Start) and, until the first sign
// of trouble, grows multiplicatively (slow start: Config.SlowStart per
// second) so that an unknown limit is found in seconds, not minutes. After
// the first decrease it grows additively: Config.Increase requests per
// second for every second of fast successes. It decreases multiplicatively
// (Config.Decrease) on:
//
//   - a throttle (429, 503, a ban, THROTTLED in a body), an overload (5xx,
//     timeouts) or a Retry-After, once per episode: a signal about a request
//     sent before the last decrease was already answered by it, so a burst of
//     429s from requests in flight at the same time decreases once, not once
//     per response. A request sent after the pause that came with the last
//     decrease had ended is news within Config.Cooldown too, when that
//     pause was longer than a few milliseconds: it left at the rate that
//     decrease set. After a decrease with a Retry-After (each
//     one pauses the key), recovery aims no higher than the rate it cut
//     from. A throttle
//     with no Retry-After (a bare 429, a 503) leaves the key sending, so
//     the share of the calls sent since the last decrease that were served
//     says how far over the limit the rate is: when fewer than Decrease of
//     at least 8 were served, the rate goes to 0.95 of that share of
//     itself at once, cooldown or not (a slow start that overshot a
//     provider's large burst is back under its limit in two cuts);
//   - latency: when the p95 of the last RingSize successes is above
//     Config.LatencyFactor times the latency target, by up to half when the
//     p95 is far above it. The target is an EWMA of fast successes' latency
//     (weight Config.LatencyWeight per second), anchored to
//     Config.LatencyTarget when it is set. The latency alone, with no
//     throttle signal, moves the rate only within bounds: never below
//     LatencyFloor (0.4) of the highest rate calls succeeded at in the last
//     10 to 20 s, so that a caller whose own delays read as the provider's
//     cannot talk itself down to nothing.
//
// A latency-only decrease (the p95 rule above, or Config.Queue below) also
// needs a real queue of the key's own calls, as TCP Vegas measures one: at
// least QueueCalls (1) queued, rate x (latency - base) with the rate in
// calls per second and the latencies in seconds, the base being the
// fastest recent success (or the latency target, when lower). Against a
// provider that serves its calls one after another, a call that meets
// another waits for one service slot (10 to 20 ms against a base of 2 ms,
// 5 to 10 x it) at any load, and at a rate under the server's that is
// under one call: a success slower than the ratios allow but behind less
// than QueueCalls counts as fast (it earns the increase, and its latency
// moves the target), so that such waits do not walk the rate down without
// end. The queue is the provider's, and so the fleet's: when the key is
// one process of a fleet that adapts its share each, Controller.FleetShare
// tells it which share of the fleet's calls is its own, and the queue is
// counted at the fleet's rate (the key's over its share), so that two
// processes are not cut only once the queue holds two calls.
//
// With Config.Plateau set, recovery after a decrease levels off at that
// fraction of the rate the decreases began at (half way closer when the
// trouble was found while holding there) and holds for Config.Hold before
// probing above it again: against a provider whose every refusal pauses the
// key (a Retry-After rounded up to whole seconds), probing rarely near the
// last cut costs fewer pauses than a sawtooth (the plateau of TCP CUBIC). A
// plateau held for a whole Hold is proven (State.Good): a probe that fails
// within 10 % above it returns to it at once (to 98 % of it when the probe
// failed within 1 %), and the next probe waits twice as long, up to 8 x
// Hold, so that a key at a limit that does not move pays for a probe ever
// more rarely; trouble at the plateau itself is an ordinary decrease. A
// probe a provider's queue fails (Config.Queue) goes under the plateau by
// as much as drains the wait in a quarter of a second, then back to it, so
// that the calls it queued do not drain at the few per cent the plateau
// leaves under the limit, every answer behind them slow. A
// probe grows by 10 % of itself a second (additively, as after any
// decrease, when SlowStart is negative), so that within about a second it
// is where a limit that rose shows: a probe that gets more than 10 % above
// the plateau and above the rate where the last decrease found trouble (the
// rate a failed probe was refused at), served that fast for a whole second
// with no trouble, has found a limit that rose (a provider's burst lets the
// rate it refused pass for a second or so). It ramps up (x1.65 a second)
// until the first refusal, which ends it as it ends a slow start, so a
// raised limit is reached within seconds of the probe, not at 2 % a second.
// A probe that fails with a Retry-After costs the whole key that pause (the
// same one refusal and pause at 10 % a second as at 2 %, since a provider's
// burst is spent the sooner), so the hold is also at least 30 times the
// longest pause since the last decrease without one (30 s after the whole
// second a provider rounds a few milliseconds up to), except at a level
// that is a guess under the limit, not a rate refused: the slow start's,
// and one under a rate resumed at that grew 15 % or more before a refusal
// chained soon after its pause; those hold for Hold alone. With a plateau, a
// throttle that pauses the key (a Retry-After) after slow start cuts only
// to the plateau under the rate refused (half way closer only when the
// level had held 2 s), since the pause itself sheds the load and the key
// should resume near its last good rate; one refused again within 2 s of
// the pause's end cuts by Decrease twice, since the limit fell well below
// (so that a provider that bans after a few refusals sees few), and
// recovers under the rate the last pause resumed at (a second such refusal
// in a row, 5 % further under: the episodes so far cost such a provider
// most of its count); the refusal that ends
// slow start, which overshoots, also cuts by Decrease twice and recovers
// under one Decrease of the rate refused. A refusal with a Retry-After at a
// rate the key held for a whole 2 s with successes, 10 s or more after the
// last throttle signal, may say that the limit fell by a step of unknown
// size, or only that a level near the limit met calls that left a little
// unevenly (often, on a machine starved of CPU): it cuts to the plateau
// under the rate refused, as any refusal after slow start does, and a
// process whose calls leave in bunches (Sample.Bunched) keeps its rate. A
// limit that did fall refuses the key again soon after the pause, which
// halves the rate the key held (the rate the first refusal came at, or the
// higher rate it sustained before a latency cut took it lower, since its
// last refusal that cut); the rate holds there, with no
// recovery towards the old level, until a probe after the hold (so that a
// provider banning after a few refusals in 10 s sees two episodes of them
// at a halving, not three).
//
// Many providers count calls in windows of a second aligned to the clock
// and refuse the rest of a window once its count is spent. Their refusal
// comes late in a second, and every call sent after it in that second is
// refused too. When a refusal with a Retry-After came for a call sent in
// the second half of a clock second, and the calls sent after it in the
// same second, while it was in flight, are all refused as well (none
// served; the read waits for the first answer after the pause, when all
// were answered), the calls served in that second before the
// refusal, if at least half the rate refused, are read as the window's
// count: the rate is set to 0.97 of it, down or up, and recovers to no
// more until a probe after the hold. A token bucket serves some of the calls
// after a refusal, even far over its limit, so its refusals are not read
// so. It needs a call in
// flight when the refusal comes, which is when an episode of refusals costs
// several; the key's own refusals show it even when the episode began with
// another process's pause, heard of from the store first. A provider that
// answers faster than the key sends leaves no call in flight: there, two
// episodes within 10 s, each refused late in its second after the same
// count served (within 5 %) at rates at least 10 % apart, show the window
// instead, since a window's count does not move with the rate. Either may
// be another process's refusal, heard of from the store (up to two calls
// after the second turned, when the key next tried to send): the key's own
// calls served that second are then its share of the count. A key that
// shares its limit so (it heard of another's refusal, or was told its
// share of the fleet's calls) reads no window from its own counts, which
// agree by chance as well as by a window, but only from the fleet's (see
// below). A refusal after a
// quarter to a half of the rate was served in its second (a slow start's
// end, whose rate grew through the second) counts too, but only with one at
// a point of its second at least 0.1 s apart, where a token bucket would
// have served a different count. Each process's share of a window moves
// from one episode to the next as the rates do, so each also tells the
// fleet its share of such a second through the store (State.LateSecond),
// and reads back the fleet's sum once the pause is over
// (Controller.FleetCount): two episodes whose fleet counts agree show the
// window too. After a read from two episodes the level is the key's share
// of the count, taken up at once, not a plateau under the rate refused.
// Neither read takes a pause of 100 ms or less, a token's wait rather than
// a window's rest. Once a window was read, a refusal at a rate the key
// held, late in a second after fewer than 0.9 of the calls the second
// before served, says the limit fell, by a step the count only bounds (a
// limit that changes late in a second refuses at once, after as many
// calls as the old one had served by then): the rate held halves at once,
// or goes to 0.97 of the count if that is lower, as a refusal after the
// pause would confirm, so that the next second is not a second episode.
//
// A ban starts the key over (see Sample.Banned); other answers of the same
// ban, including another process's heard of as the key's own ends, change
// nothing, and a probe that ramps after it levels off at the plateau under
// the rate the ban came at, or under the rate a refusal chained soon
// before it read from the calls served since the episode before (at most
// the provider's rate), when that is lower.
//
// With Config.Queue set, the latency gradient (as in TCP Vegas) reads a
// provider that queues calls before it is slow: when the median of the
// last few successes is above Queue times the base latency (the fastest
// recent success), the rate decreases by as much as the queue is deep (at
// most by half), again only if the queue keeps growing rather than
// draining, and levels off just under the rate cut from; a success that
// waited in such a queue earns no increase. Both need the queue of
// QueueCalls above as well as the ratio.
//
// Both allow for the provider's own scatter: how far over its fastest
// answer its median and its slow answers come when no queue of the key's
// calls can explain it. It is measured in the slow start, while the
// fleet's rate times the fastest answer is under a quarter of a call and
// the answers come in no order and each is drawn afresh, or, for a key
// that never was at rest, learned from a queue read soon after a latency
// decrease that did not shorten the queue though the rate fell (a median
// under half of the one at the decrease is the queue shortening); that
// read undoes the decrease (its rate, the level recovery aims at, and a slow
// start it ended). A throttle signal soon after a latency decrease is a
// new episode, cooldown or not: a queue is no refusal. The queue
// rule then takes half way from the scatter's median to its tail off the
// median it judges, the latency rule's bound rises, where the scatter's
// tail comes near it, to the tail plus Queue times the base over the
// base, and a success within the scatter earns the increase (issue 18: answers in 5 ms plus up to 20 ms
// at random read as a queue every second or two, and held a fleet far
// under its limit with no refusal).
//
// The rate grows only while it is below Config.UsageMultiple times the
// calls the key completes per second: a lightly used key does not bank a
// rate it never tried and spend it in one burst later (the rate-based
// counterpart of TCP's congestion window validation, RFC 7661).
//
// Errors never raise the rate (a one-way ratchet: Failed and every
// non-success leave it or lower it); the rate stays within
// [Config.Floor, Config.Ceiling] and under a provider-reported rate
// (Sample.Hint); a first or raised Hint that no trouble contradicts sets
// the rate to it at once, since a rate the provider states needs no slow
// start; so does the first success after a throttle that came with a new,
// lower Hint (the provider stated its new rate as it refused). After a
// refusal with a Retry-After at or under an unchanged Hint, recovery goes
// back to the Hint too, about a second after the pause, once a minute
// (the pause shed what the provider's own figure says was no excess:
// sends bunched on a starved machine; a second such refusal within the
// minute is a limit under the stated one, and levels as any). A
// Retry-After pauses the key until then: Paused reports
// it, and the caller sends nothing until it is over.
//
// A ban (Sample.Banned with a Retry-After: a 418, Binance's "IP banned")
// says the provider counted too many refusals, and what it allows when the
// ban ends is unknown: the key starts over from Start and recovers, as
// fast as slow start, to a quarter of the rate it was banned at, where it
// holds for Config.Hold before a probe. The other answers of the same ban
// change nothing.
//
// A caller maps package signal's Report onto a Sample: Throttled when
// Report.Throttled, Overloaded for other transient outcomes that hint at
// load (Report.Unknown or Report.Timeout: 500, 502, 504, timeouts), Success
// for ClassSuccess, Failed for everything else; RetryAfter from
// Report.RetryAfter.
//
// Times are int64 Unix microseconds and latencies int64 microseconds, as in
// the other pure packages; nothing here blocks, reads a clock or allocates.
// Controller and State are plain values. State keeps its bookkeeping
// private: Controller.Rate, State.Paused, State.Hint, State.P95 and the
// like read it; Controller.Observe (and SetRate, State.CapTarget) change
// it. Locked is the thin mutex wrapper for callers that share one key
// between goroutines.
package aimd
