// Package dashboard is Sluice's web dashboard, served by `sluice serve` at
// /ui/: server-rendered pages (html/template, embedded with the binary;
// no build step) whose live part refreshes by polling the same page as an
// HTML fragment (?fragment=1), with a little vanilla JavaScript that also
// counts down expiries and asks before any state-changing action.
//
// Pages:
//   - Overview (/ui/): allowed, denied and shadow-denied decisions per
//     policy over the last hour (a chart per policy), the rate store's
//     health (answers decided by outage modes in the last five minutes),
//     and the keys nearest their limit.
//   - Policies and keys (/ui/policies): each policy's definition; a key
//     look-up showing remaining, reset time and recent decisions; the
//     hottest keys.
//   - Adaptive outbound (/ui/outbound): per upstream key the learned rate
//     over time, latency (p50, p95 and EWMA), throttles, the provider's
//     stated limit (limit per window, remaining, reset) and the rate it
//     implies, and Retry-After pauses (paused now, how many, the latest),
//     from an OutboundSource.
//   - Breakers (/ui/breakers): outbound breakers' states, and the job
//     store's durable breaker transitions (seed 002 D6).
//   - Leases (/ui/leases): holders (by fingerprint), fencing tokens,
//     expiry countdowns, refused asks and waiters (holders refused within
//     WaitWindow and not granted since) of the lease keys served.
//   - Slots (/ui/slots): occupancy of the next windows of each config as a
//     heatmap, CLOSED windows marked.
//   - Jobs (/ui/jobs): connectors with pause/resume, jobs with next run,
//     cursor and bookmarks, parked jobs, latest runs and gap records.
//
// Where the data comes from: the server feeds a Recorder (it implements
// server.Observer) with every decision, lease acquire and slot config it
// handles; the Recorder keeps bounded state only: per policy 360 buckets of
// 10 s, a space-saving sketch of the TopKeys hottest keys, NearKeys keys
// near their limit and the latest RecentDecisions decisions; and at most
// MaxLeaseKeys lease keys and MaxSlotConfigs config names. No key becomes
// a metric label. Key look-ups read a key with a take of cost 0, which
// charges nothing. Counts are this server's own: in a fleet each server's
// dashboard shows the decisions it made, while remaining, holders, slots
// and jobs come from the shared stores. Every section says which it is,
// with a "Fleet" or a "This server only" badge.
//
// The policies are those of the limiter in force: Config.Current
// (server.Server.Limiter) is asked on every page, so a configuration
// reload shows on the next refresh.
//
// Actions (pause and resume a connector, release a lease, flush the slot
// config cache) are POST forms confirmed in a dialog (without JavaScript,
// on a confirmation page), refused when cross-site, and asked of
// Config.Authorize first (wire the admin scope there). Pause, resume and
// flush go through the server's own API handler in process, with the page
// request's credentials; a lease is released through the limiter, as the
// API releases only for the holder that knows its lease id.
//
// Every page answers with a strict Content-Security-Policy (no inline
// script or style), so the pages carry no inline styles or handlers.
package dashboard
