// A worker loop for Sluice's adaptive calls over HTTP, using only fetch.
//
// It is plain JavaScript with JSDoc types, so that Node 20 runs it as is
// (node worker.mjs) and TypeScript checks it (tsc --allowJs --checkJs
// --noEmit worker.mjs) or imports it: Node 20 cannot run .ts files without
// a build step.
//
// Every call to the upstream takes a permit first (POST /v1/outbound/acquire)
// and reports what came back (POST /v1/outbound/report). Sluice answers how
// long to wait when the key is paced or paused (a Retry-After any worker of
// the fleet saw pauses them all), refuses while the key's breaker is open,
// and says whether to retry a failure and when.
//
// Environment: SLUICE_URL (default http://127.0.0.1:8080), SLUICE_TOKEN
// (sent as a bearer token when set), UPSTREAM_URL (required), KEY (default:
// the upstream's host), CALLS (successful calls to make, default 5),
// MAX_STEPS (bound on loop turns, default 1000). Each event is printed as
// one JSON line.

/** @typedef {{permit: string, key: string, grantedAt: string, expiresAt: string, waitedMs: number}} Permit */
/** @typedef {{type: string, status: number, detail?: string, retryAfterMs?: number, paused?: boolean, busy?: boolean}} Problem */
/** @typedef {{key: string, permitKnown: boolean, class: string, throttled: boolean, banned: boolean,
 *   unknown: boolean, retry: boolean, retryAfterMs: number, stop?: string, rate: number, pausedForMs: number}} Verdict */

const sluice = process.env.SLUICE_URL ?? "http://127.0.0.1:8080";
const upstream = process.env.UPSTREAM_URL;
if (!upstream) {
  console.error("worker: UPSTREAM_URL is required");
  process.exit(2);
}
const key = process.env.KEY ?? new URL(upstream).host;
const calls = Number(process.env.CALLS ?? "5");
const maxSteps = Number(process.env.MAX_STEPS ?? "1000");

/** Headers the signal parsers read; the others need not be sent. */
const reported = /^(retry-after|ratelimit.*|x-ratelimit-.*|x-mbx-.*|x-shopify-.*)$/i;

/** @param {number} ms */
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** @param {unknown} event */
const log = (event) => console.log(JSON.stringify(event));

/**
 * POST a JSON body to Sluice.
 * @param {string} path
 * @param {unknown} body
 * @returns {Promise<{status: number, body: any}>}
 */
async function post(path, body) {
  /** @type {Record<string, string>} */
  const headers = { "Content-Type": "application/json" };
  if (process.env.SLUICE_TOKEN) headers.Authorization = `Bearer ${process.env.SLUICE_TOKEN}`;
  const res = await fetch(sluice + path, { method: "POST", headers, body: JSON.stringify(body) });
  return { status: res.status, body: await res.json() };
}

/**
 * One upstream call under a permit, retried as Sluice advises.
 * @returns {Promise<boolean>} whether it succeeded
 */
async function call() {
  for (let attempt = 1; ; attempt++) {
    const acq = await post("/v1/outbound/acquire", { key, waitMs: 1000, idempotent: true });
    if (acq.status !== 200) {
      /** @type {Problem} */
      const p = acq.body;
      if (acq.status !== 429 && acq.status !== 503) throw new Error(`acquire: ${acq.status} ${p.detail}`);
      log({ event: p.type.endsWith("breaker-open") ? "breaker_open" : "wait", retryAfterMs: p.retryAfterMs, paused: p.paused });
      await sleep(Math.max(p.retryAfterMs ?? 1000, 1));
      return false;
    }
    /** @type {Permit} */
    const permit = acq.body;
    const began = performance.now();
    /** @type {Record<string, unknown>} */
    const report = { permit: permit.permit, attempt };
    try {
      const res = await fetch(upstream);
      const text = await res.text();
      report.status = res.status;
      /** @type {Record<string, string>} */
      const headers = {};
      res.headers.forEach((v, k) => { if (reported.test(k)) headers[k] = v; });
      report.headers = headers;
      if ((res.headers.get("content-type") ?? "").includes("json")) report.body = text.slice(0, 65536);
    } catch (err) {
      report.error = err instanceof Error && err.name === "TimeoutError" ? "timeout" : "network";
    }
    report.latencyMs = performance.now() - began;
    const rep = await post("/v1/outbound/report", report);
    if (rep.status !== 200) throw new Error(`report: ${rep.status} ${rep.body.detail}`);
    /** @type {Verdict} */
    const v = rep.body;
    log({ event: "called", status: report.status ?? report.error, class: v.class, throttled: v.throttled,
      pausedForMs: v.pausedForMs, retry: v.retry, rate: v.rate });
    if (v.class === "success") return true;
    if (!v.retry) {
      // Throttled (the key is paused: the next acquire waits it out), or not
      // worth retrying: v.stop says why (budget_exhausted, not_idempotent...).
      return false;
    }
    await sleep(v.retryAfterMs);
  }
}

let ok = 0;
for (let step = 0; ok < calls && step < maxSteps; step++) {
  if (await call()) ok++;
}
log({ event: "done", successes: ok });
process.exit(ok === calls ? 0 : 1);
