-- Sluice rate store: every store.RateStore operation is one call of this
-- script. It mirrors store.Eval (gcra.Params.TakeTo, window.FixedTake,
-- window.SlidingTake), store.EvalSettle and store.EvalSync exactly; read
-- those first. The Go side validates every request and passes only numbers
-- below 2^53, where Lua's doubles are exact integers. wire.go holds the
-- protocol: each operation's arguments and its one reply layout, written
-- and decoded there alone.
--
-- ARGV[1] op: 'g' one GCRA take, 't' take (one or more items, all or
--             nothing), 'b' a batch of independent takes, 's' settle,
--             'y' sync, 'r' reset
-- ARGV[2] now in Unix microseconds, or 0 for the server clock (TIME);
--         'g' has it in ARGV[5]
--
-- A limit is three numbers: alg (0 gcra, 1 fixed window, 2 sliding window),
-- x (gcra: the emission interval T; windows: the window w, both in us) and
-- y (gcra: the burst; windows: the limit).
--
-- Every reply but that of 'r' is made of items, an item being five numbers:
-- allowed, remaining, reset after, retry after, delay.
--
-- 'g': one key; ARGV[2..4] x, y, cost; ARGV[5] now (absent: 0) and
--      ARGV[6] max delay (absent: 0). The take of 't' with alg 0, in the
--      fewest arguments and the shortest reply: {now, item}, whose
--      trailing zeros are left out (retry after and delay for an allowed
--      take without delay: its fast path returns four numbers).
-- 't': ARGV[3] max delay (us), then per key i: alg, x, y, cost.
--      Returns {now, all allowed, then an item per key}.
-- 'b': ARGV[2] is unused; per key i: now (0: the server clock), max delay,
--      alg, x, y, cost.
--      Each take stands alone, in order, as if it were its own 't'.
--      Returns {server now (0 if unread), then an item per key}.
-- 's': ARGV[3..5] alg, x, y; ARGV[6] the difference (gcra: (actual -
--      reserved) * T; windows: actual - reserved); ARGV[7] the end of the
--      window the reservation was taken in; ARGV[8] the most a window may
--      count after a charge, or (gcra) the most TAT - now may be after
--      one (gcra.MaxSpan - tau). Returns {now, item} (a peek).
-- 'y': ARGV[3..5] alg, x, y; ARGV[6] remaining (clamped to [0, y]);
--      ARGV[7] reset after (us). Returns {now, item} (a peek).
-- 'r': deletes KEYS[1]; returns the number of keys deleted.
--
-- A failure replies {now, code}, code -1 for a charge too large to count
-- (store.ErrCostExceedsLimit), -2 for a state beyond 2^53 (ErrOutOfRange);
-- nothing is written then. In a 'b' reply a failed take's item is {code,
-- 0, 0, 0, 0} and the other takes stand.
--
-- State is stored as a string: "t" (a TAT with no counts, fresh at t) or
-- "t c p f" (store.State's Time, Count and Prev, and f the FreshAt under the
-- limit that wrote it). A key whose state is fresh is deleted; otherwise it
-- expires when its state would become fresh (store.FreshAt), rounded up to
-- a millisecond, and reads as nothing from f on (store.Live), expired yet
-- or not. A value "t c p" that an older version wrote has no f: it reads
-- as it is until Redis expires it.

local op = ARGV[1]

-- The hot path, first and with nothing made before it: one GCRA take of
-- a key holding a bare TAT or nothing. It is gcra1 below, inlined: calling
-- gcra1 instead (after making the helpers) cost 0.8 us more a call, 12 %,
-- under pipelined load. A key holding window state (its limit changed
-- algorithm) goes on to the general code.
if op == 'g' then
	local k = KEYS[1]
	local v = redis.call('GET', k)
	local t = 0
	if v then
		t = tonumber(v) -- nil for window state, "t c p"
	end
	if t then
		local x, y, cost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
		local now, md = tonumber(ARGV[5] or 0), tonumber(ARGV[6] or 0)
		local override = now ~= 0
		if not override then
			local tm = redis.call('TIME')
			now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
		end
		local tau = y * x
		local tat = t
		if now > tat then
			tat = now
		end
		local ntat = tat + cost * x
		-- allowAt - now, added up so that every term stays below 2^53
		-- and exact even when ntat does not.
		local wait = (tat - now) + (cost * x - tau)
		-- Remaining, after the take if allowed: fdiv(r, x), inlined.
		local denied = wait > md
		local r, rem, q, m = tau - (ntat - now), 0, 0, 0
		if denied then
			r = tau - (tat - now)
		end
		if r > 0 then
			rem = math.floor(r / x)
			m = r - rem * x
			if m < 0 then
				rem = rem - 1
			elseif m >= x then
				rem = rem + 1
			end
		end
		if denied then
			return { now, 0, rem, tat - now, wait }
		end
		if cost ~= 0 then
			-- put(k, ntat, ntat, 0, 0, now, override)
			if ntat >= 9007199254740992 or ntat <= -9007199254740992 then
				return { now, -2 }
			end
			if ntat <= now then
				redis.call('DEL', k)
			else
				if override then
					q = ntat - now + 999
				else
					q = ntat + 999
				end
				local ms = math.floor(q / 1000)
				m = q - ms * 1000
				if m < 0 then
					ms = ms - 1
				elseif m >= 1000 then
					ms = ms + 1
				end
				if override then
					if ms < 600000 then
						ms = 600000 -- MIN_TEST_TTL_MS
					end
					redis.call('SET', k, ntat, 'PX', ms)
				else
					redis.call('SET', k, ntat, 'PXAT', ms)
				end
			end
		end
		if wait > 0 then
			return { now, 1, rem, ntat - now, 0, wait }
		end
		return { now, 1, rem, ntat - now }
	end
end

if op == 'r' then
	return redis.call('DEL', KEYS[1])
end

-- The helpers below are closures created anew on each call: those the
-- hot paths (GCRA takes of keys whose state is a bare TAT, the only form a
-- GCRA key is stored in unless it once held window state) need come
-- first, and those paths return before the others are made.

local EXACT = 9007199254740992 -- 2^53
-- With an overridden clock (tests), a key lives at least this long in real
-- time, so that a fake clock running slower than the real one never loses
-- state it still needs.
local MIN_TEST_TTL_MS = 600000

-- floor(a/b) for integers a and b > 0 below 2^53: the rounded double
-- quotient is off by at most one, which the remainder corrects.
local function fdiv(a, b)
	local q = math.floor(a / b)
	local r = a - q * b
	if r < 0 then
		q = q - 1
	elseif r >= b then
		q = q + 1
	end
	return q
end

-- put stores a state decided at now, whose FreshAt is fa, or deletes the
-- key when fa is not after now. The key expires at fa.
local function put(k, fa, t, c, p, now, override)
	if fa <= now then
		redis.call('DEL', k)
		return
	end
	local v
	if c == 0 and p == 0 then
		v = t -- a number, which Redis writes exactly below 2^53
	else
		v = string.format('%.0f %.0f %.0f %.0f', t, c, p, fa)
	end
	if override then
		local ms = fdiv(fa - now + 999, 1000)
		if ms < MIN_TEST_TTL_MS then
			ms = MIN_TEST_TTL_MS
		end
		redis.call('SET', k, v, 'PX', ms)
	else
		redis.call('SET', k, v, 'PXAT', fdiv(fa + 999, 1000))
	end
end

-- gcra is gcra.Params.TakeTo on the TAT t: it returns allowed (1 or 0),
-- remaining, retry after, reset after, delay, and the new TAT (t when
-- denied or when cost is 0).
local function gcra(t, now, x, y, cost, md)
	local tau = y * x
	local tat = t
	if now > tat then
		tat = now
	end
	local ntat = tat + cost * x
	local wait = (tat - now) + (cost * x - tau) -- allowAt - now, exact (see 'g')
	if wait > md then
		local r, rem = tau - (tat - now), 0
		if r > 0 then
			rem = fdiv(r, x)
		end
		return 0, rem, wait, tat - now, 0, t
	end
	local r, rem, delay = tau - (ntat - now), 0, 0
	if r > 0 then
		rem = fdiv(r, x)
	end
	if wait > 0 then
		delay = wait
	end
	if cost == 0 then
		return 1, rem, 0, ntat - now, delay, t
	end
	return 1, rem, 0, ntat - now, delay, ntat
end

-- gcra1 takes cost at now from the state v (a bare TAT, or nil: fresh) of
-- key k and stores the result at once. It returns an item: allowed (1, 0,
-- or -2 for a state beyond 2^53), remaining, reset after, retry after,
-- delay.
local function gcra1(k, v, now, override, x, y, cost, md)
	local t = 0
	if v then
		t = tonumber(v)
	end
	local ok, rem, retry, reset, delay, nt = gcra(t, now, x, y, cost, md)
	if nt ~= t then
		if nt >= EXACT or nt <= -EXACT then
			return -2, 0, 0, 0, 0
		end
		put(k, nt, nt, 0, 0, now, override)
	end
	return ok, rem, reset, retry, delay
end

-- A 'b' call whose first takes are such GCRA takes decides them here, and
-- those after the first that is not (bfrom) below, with the reply so far
-- (bout) and the server clock if read (server_now).
-- bnow(b), made for 'b' calls only, returns the instant of the take whose
-- arguments follow ARGV[b] and whether the caller set it; the server clock
-- is read once a call.
local server_now, bfrom, bout, bnow = 0, 1, nil, nil

if op == 't' and #KEYS == 1 and ARGV[4] == '0' then
	local k = KEYS[1]
	local v = redis.call('GET', k)
	if not v or not string.find(v, ' ', 1, true) then
		local now = tonumber(ARGV[2])
		local override = now ~= 0
		if not override then
			local tm = redis.call('TIME')
			now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
		end
		local ok, rem, reset, retry, delay = gcra1(k, v, now, override,
			tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[3]))
		if ok == -2 then
			return { now, -2 }
		end
		return { now, ok, ok, rem, reset, retry, delay }
	end
elseif op == 'b' then
	bnow = function(b)
		local now = tonumber(ARGV[b + 1])
		if now ~= 0 then
			return now, true
		end
		if server_now == 0 then
			local tm = redis.call('TIME')
			server_now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
		end
		return server_now, false
	end
	bout = { 0 }
	for i = 1, #KEYS do
		local b = 2 + (i - 1) * 6
		if ARGV[b + 3] ~= '0' then
			break
		end
		local k = KEYS[i]
		local v = redis.call('GET', k)
		if v and string.find(v, ' ', 1, true) then
			break
		end
		local now, override = bnow(b)
		local n = #bout
		bout[n + 1], bout[n + 2], bout[n + 3], bout[n + 4], bout[n + 5] = gcra1(k, v, now, override,
			tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6]), tonumber(ARGV[b + 2]))
		bfrom = i + 1
	end
	if bfrom > #KEYS then
		bout[1] = server_now
		return bout
	end
end

-- decide is store.Eval: it returns allowed (1 or 0), remaining, retry
-- after, reset after, delay, and the new state (the old one when denied or
-- when cost is 0).
local function decide(alg, x, y, t, c, p, now, cost, md)
	if alg == 0 then
		-- gcra.Params.TakeTo: only the time moves (store.Eval)
		local ok, rem, retry, reset, delay, nt = gcra(t, now, x, y, cost, md)
		return ok, rem, retry, reset, delay, nt, c, p
	end
	-- window.current
	local w, lim = x, y
	local e = (fdiv(now, w) + 1) * w -- window.alignUp(now, w)
	local cur, prev
	if e < t then
		-- The clock ran backwards, or Sync paused the key.
		e, cur, prev = t, c, p
	elseif e == t then
		cur, prev = c, p
	elseif e == t + w then
		cur, prev = 0, c
	else
		cur, prev = 0, 0
	end
	if alg == 1 then
		-- window.FixedTake
		if cur + cost > lim then
			return 0, math.max(lim - cur, 0), e - now, e - now, 0, t, c, p
		end
		cur = cur + cost
		local reset = 0
		if cur > 0 then
			reset = e - now
		end
		if cost == 0 then
			return 1, lim - cur, 0, reset, 0, t, c, p
		end
		return 1, lim - cur, 0, reset, 0, e, cur, 0
	end
	-- window.SlidingTake. A state whose window would end at 2^53 or
	-- later under this limit (one a fixed window of the same name left,
	-- after a policy reload) is out of range, as in store.Eval; below it,
	-- every answer is added up from terms below 2^53, so it is exact.
	if (c ~= 0 or p ~= 0) and t + w >= EXACT then
		return -2, 0, 0, 0, 0, t, c, p
	end
	local start = e - w
	local elapsed = math.min(math.max(now - start, 0), w)
	local est = cur
	if prev ~= 0 and elapsed < w then
		-- window.weighted: ceil(prev*(w-elapsed)/w)
		local n = prev * (w - elapsed) + w - 1
		if n > EXACT then
			-- Unreachable: window.Settle bounds counts so that this holds.
			error('sluice: state beyond 2^53, the exact range of Lua numbers')
		end
		est = est + fdiv(n, w)
	end
	if est + cost > lim then
		-- window.firstElapsed, in this window or the next
		-- (at - now, added up from e - now)
		local at, budget
		if cur + cost <= lim then
			at, budget = (e - now) - w, lim - cur - cost
			if prev > budget then
				at = (e - now) - fdiv(budget * w, prev)
			end
		else
			at, budget = e - now, lim - cost
			if cur > budget then
				at = (e - now) + (w - fdiv(budget * w, cur))
			end
		end
		local reset = 0 -- window.slidingReset
		if cur > 0 then
			reset = (e - now) + w
		elseif prev > 0 then
			reset = e - now
		end
		return 0, math.max(lim - est, 0), math.max(at, 1), reset, 0, t, c, p
	end
	local ncur = cur + cost
	local reset = 0
	if ncur > 0 then
		reset = (e - now) + w
	elseif prev > 0 then
		reset = e - now
	end
	if cost == 0 then
		return 1, lim - est, 0, reset, 0, t, c, p
	end
	return 1, lim - est - cost, 0, reset, 0, e, ncur, prev
end

-- load returns the state of k as it reads at now (store.Live: nothing
-- once its fresh time has passed) and that fresh time (0 for nothing;
-- EXACT for a value of an older version, which carries none).
local function load(k, now)
	local v = redis.call('GET', k)
	if not v then
		return 0, 0, 0, 0
	end
	local t, c, p, fa
	if not string.find(v, ' ', 1, true) then
		t, c, p = tonumber(v), 0, 0
		fa = t
	else
		t, c, p, fa = string.match(v, '^(%-?%d+) (%d+) (%d+) (%-?%d+)$')
		if t then
			t, c, p, fa = tonumber(t), tonumber(c), tonumber(p), tonumber(fa)
		else
			t, c, p = string.match(v, '^(%-?%d+) (%d+) (%d+)$')
			t, c, p, fa = tonumber(t), tonumber(c), tonumber(p), EXACT
		end
	end
	if fa <= now then
		return 0, 0, 0, 0
	end
	return t, c, p, fa
end

-- fresh returns store.FreshAt of a state, and whether the state can be
-- stored exactly.
local function fresh(alg, w, t, c, p)
	local fa = t
	if alg ~= 0 then
		if c == 0 and (alg == 1 or p == 0) then
			fa = 0
		elseif alg == 2 then
			fa = t + w
		end
	end
	return fa, fa < EXACT and t > -EXACT and c < EXACT and p < EXACT
end

local now
if op == 'g' then
	now = tonumber(ARGV[5] or 0)
else
	now = tonumber(ARGV[2])
end
local override = now ~= 0
if op ~= 'b' and not override then
	local tm = redis.call('TIME')
	now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
	server_now = now
end

if op == 'g' or (op == 't' and #KEYS == 1) then
	-- One take of a window algorithm, or of a GCRA key holding window state.
	local k, alg, x, y, cost, md = KEYS[1], 0, 0, 0, 0, 0
	if op == 'g' then
		x, y, cost, md = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[6] or 0)
	else
		alg, x, y, cost, md = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[3])
	end
	local t, c, p = load(k, now)
	local ok, rem, retry, reset, delay, nt, nc, np = decide(alg, x, y, t, c, p, now, cost, md)
	if ok == -2 then
		return { now, -2 }
	end
	if nt ~= t or nc ~= c or np ~= p then
		local fa, fits = fresh(alg, x, nt, nc, np)
		if not fits then
			return { now, -2 }
		end
		put(k, fa, nt, nc, np, now, override)
	end
	if op == 'g' then
		return { now, ok, rem, reset, retry, delay }
	end
	return { now, ok, ok, rem, reset, retry, delay }
end

if op == 's' or op == 'y' then
	local k = KEYS[1]
	local alg, x, y = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
	local t, c, p = load(k, now)
	local nt, nc, np = t, c, p
	if op == 's' then
		local d, rend = tonumber(ARGV[6]), tonumber(ARGV[7])
		if alg == 0 then
			-- gcra.Settle; EvalSettle keeps only the TAT. The Go side
			-- has checked the bound on charges.
			local tat = t
			if d > 0 then
				tat = math.max(t, now)
				-- gcra.Settle's bound on the debt: ARGV[8] is MaxSpan - tau.
				if d > tonumber(ARGV[8]) - (tat - now) then
					return { now, -1 }
				end
				tat = tat + d
			elseif d < 0 then
				tat = t + d
			end
			if d ~= 0 and tat < now then
				tat = now
			end
			nt, nc, np = tat, 0, 0
		else
			-- window.Settle, on window.current
			local w = x
			local e, cur, prev = (fdiv(now, w) + 1) * w, 0, 0
			if e < t then
				e, cur, prev = t, c, p
			elseif e == t then
				cur, prev = c, p
			elseif e == t + w then
				prev = c
			end
			if d > 0 then
				if d > tonumber(ARGV[8]) - cur then
					return { now, -1 }
				end
				if alg == 1 then
					prev = 0
				end
				nt, nc, np = e, cur + d, prev
			elseif d < 0 then
				if e ~= rend then
					if alg == 2 and e == rend + w then
						nt, nc, np = e, cur, math.max(prev + d, 0)
					end
				else
					if alg == 1 then
						prev = 0
					end
					nt, nc, np = e, math.max(cur + d, 0), prev
				end
			end
		end
	else
		local r, ra = tonumber(ARGV[6]), tonumber(ARGV[7])
		if alg == 0 then
			-- gcra.Sync
			if r == 0 and ra > 0 then
				nt = now + ra + (y - 1) * x
			else
				nt = now + (y - r) * x
			end
			nc, np = 0, 0
		else
			-- window.Sync
			local e = (fdiv(now, x) + 1) * x
			if r == 0 and now + ra > e then
				e = (fdiv(now + ra - 1, x) + 1) * x
			end
			nt, nc, np = e, y - r, 0
		end
	end
	local ok, rem, retry, reset, delay = decide(alg, x, y, nt, nc, np, now, 0, 0)
	if nt ~= t or nc ~= c or np ~= p then
		local fa, fits = fresh(alg, x, nt, nc, np)
		if not fits then
			return { now, -2 }
		end
		put(k, fa, nt, nc, np, now, override)
	elseif ok == -2 then
		-- An unchanged state out of range under this limit (decide).
		return { now, -2 }
	end
	return { now, ok, rem, reset, retry, delay }
end

-- Several keys ('t' all or nothing, or 'b'): each key's state is loaded
-- once and kept in st[k] = {t, c, p, changed, fa, now, override, t0, c0,
-- p0}: fa is its FreshAt, as loaded or under the limit of the last take
-- that changed it (it decides the expiry, as in memstore), now and
-- override that take's instant, and t0, c0, p0 the state as loaded (at
-- the first take's instant: a 't' call has one).
local st = {}

-- take decides one item against the state of its key, as it reads at now
-- (store.Live: a 'b' call's later takes may come after its fresh time),
-- and, when allowed and in range, applies it. It returns an item: allowed
-- (or -2), remaining, reset after, retry after, delay.
local function take(k, alg, x, y, cost, now, override, md)
	local s = st[k]
	if not s then
		local t, c, p, fa = load(k, now)
		s = { t, c, p, false, fa, 0, false, t, c, p }
		st[k] = s
	end
	local t, c, p = s[1], s[2], s[3]
	if s[5] <= now then
		t, c, p = 0, 0, 0
	end
	local ok, rem, retry, reset, delay, nt, nc, np = decide(alg, x, y, t, c, p, now, cost, md)
	if nt ~= t or nc ~= c or np ~= p then
		local fa, fits = fresh(alg, x, nt, nc, np)
		if not fits then
			return -2, 0, 0, 0, 0
		end
		s[1], s[2], s[3], s[4], s[5], s[6], s[7] = nt, nc, np, true, fa, now, override
	end
	return ok, rem, reset, retry, delay
end

-- commit stores every changed state; the keys a 'b' call decided in
-- gcra1 have none here.
local function commit()
	for i = 1, #KEYS do
		local k = KEYS[i]
		local s = st[k]
		if s and s[4] then
			put(k, s[5], s[1], s[2], s[3], s[6], s[7])
			s[4] = false
		end
	end
end

if op == 'b' then
	local out = bout
	for i = bfrom, #KEYS do
		local b = 2 + (i - 1) * 6
		local now, override = bnow(b)
		local n = #out
		out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = take(KEYS[i],
			tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6]),
			now, override, tonumber(ARGV[b + 2]))
	end
	out[1] = server_now
	commit()
	return out
end

if op == 't' then
	local md = tonumber(ARGV[3])
	local out = { now, 1 }
	local all = 1
	for i = 1, #KEYS do
		local b = 3 + (i - 1) * 4
		-- Items naming the same key see each other's charges.
		local ok, rem, reset, retry, delay = take(KEYS[i],
			tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]),
			now, override, md)
		if ok == -2 then
			return { now, -2 }
		elseif ok == 0 then
			all = 0
		end
		local n = #out
		out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = ok, rem, reset, retry, delay
	end
	out[2] = all
	if all == 1 then
		commit()
		return out
	end
	-- Nothing is charged. An item that had room on its own says so, with
	-- what it has now: a peek at its stored state (memstore.TakeAll).
	for i = 1, #KEYS do
		local n = 3 + (i - 1) * 5
		if out[n] == 1 then
			local b = 3 + (i - 1) * 4
			local s = st[KEYS[i]]
			local ok, rem, retry, reset, delay = decide(
				tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), s[8], s[9], s[10], now, 0, 0)
			if ok == -2 then
				return { now, -2 }
			end
			out[n], out[n + 1], out[n + 2], out[n + 3], out[n + 4] = ok, rem, reset, retry, delay
		end
	end
	return out
end

return redis.error_reply('sluice: unknown op ' .. tostring(op))
