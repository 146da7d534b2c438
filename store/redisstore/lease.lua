-- Sluice lease store: every store.LeaseStore operation but FencedRead is
-- one call of this script, mirroring store.LeaseState. The Go side
-- validates every request and passes numbers below 2^53.
--
-- Keys (all with the lease key's hash tag):
--   H   hash holder -> "token expires": the held permits of (name, key)
--   SEQ the key's token counter (INCR), never expiring, so tokens strictly
--       increase per key for as long as Redis keeps its data, whatever
--       happens to H
--   F   hash "t:"..field -> token, "v:"..field -> value: fenced writes
--
-- ARGV[1] op, ARGV[2] now in Unix microseconds or 0 for the server clock.
-- 'a' acquire   KEYS H, SEQ; ARGV holder, permits, ttl
--               -> {now, acquired, token, expires, held, retry after, renewed}
-- 'n' renew     KEYS H; ARGV holder, token, ttl -> {now, ok, expires}
-- 'r' release   KEYS H; ARGV holder, token, channel, payload -> {now, ok}
--               (a release PUBLISHes payload on channel)
-- 'h' holders   KEYS H -> {now, holder, token, expires, ...} by token
-- 'w' fenced write KEYS H, F; ARGV token, field, value -> {now, ok}
--
-- TakeAllAcquire runs lease_take_all below: this file followed by the rate
-- script wrapped as a function (see lease.go).

-- With an overridden clock (tests), H lives at least this long in real
-- time, as rate state does.
local MIN_TEST_TTL_MS = 600000

local function clock(arg)
	local now = tonumber(arg)
	if now ~= 0 then
		return now, true
	end
	local tm = redis.call('TIME')
	return tonumber(tm[1]) * 1000000 + tonumber(tm[2]), false
end

-- load returns the live holders of H at now ({holder, token, expires}
-- sorted by token), deleting the expired ones.
local function load(h, now)
	local raw = redis.call('HGETALL', h)
	local live = {}
	local dead = {}
	for i = 1, #raw, 2 do
		local tok, exp = string.match(raw[i + 1], '^(%d+) (%d+)$')
		tok, exp = tonumber(tok), tonumber(exp)
		if exp > now then
			live[#live + 1] = { raw[i], tok, exp }
		else
			dead[#dead + 1] = raw[i]
		end
	end
	if #dead > 0 then
		redis.call('HDEL', h, unpack(dead))
	end
	table.sort(live, function(a, b) return a[2] < b[2] end)
	return live
end

-- expire sets H to vanish once its last permit ends.
local function expire(h, live, now, override)
	if #live == 0 then
		redis.call('DEL', h)
		return
	end
	local last = 0
	for _, l in ipairs(live) do
		if l[3] > last then last = l[3] end
	end
	local ms = math.floor((last - now) / 1000) + 1
	if override and ms < MIN_TEST_TTL_MS then
		ms = MIN_TEST_TTL_MS
	end
	redis.call('PEXPIRE', h, ms)
end

local function fmt(tok, exp)
	return string.format('%d %d', tok, exp)
end

-- acquire decides (and, if write, makes) an acquire. Returns acquired,
-- token, expires, held, retry after, renewed.
local function acquire(h, seq, holder, permits, ttl, now, override, write)
	local live = load(h, now)
	for _, l in ipairs(live) do
		if l[1] == holder then
			if write then
				l[3] = now + ttl
				redis.call('HSET', h, holder, fmt(l[2], l[3]))
				expire(h, live, now, override)
			end
			return 1, l[2], now + ttl, #live, 0, 1
		end
	end
	if #live >= permits then
		local first = live[1][3]
		for _, l in ipairs(live) do
			if l[3] < first then first = l[3] end
		end
		return 0, 0, 0, #live, first - now, 0
	end
	if not write then
		return 1, 0, now + ttl, #live + 1, 0, 0
	end
	local tok = redis.call('INCR', seq)
	live[#live + 1] = { holder, tok, now + ttl }
	redis.call('HSET', h, holder, fmt(tok, now + ttl))
	expire(h, live, now, override)
	return 1, tok, now + ttl, #live, 0, 0
end

local function lease_op(KEYS, ARGV)
	local op = ARGV[1]
	local now, override = clock(ARGV[2])
	if op == 'a' then
		local ok, tok, exp, held, retry, renewed = acquire(KEYS[1], KEYS[2], ARGV[3],
			tonumber(ARGV[4]), tonumber(ARGV[5]), now, override, true)
		return { now, ok, tok, exp, held, retry, renewed }
	end
	local h = KEYS[1]
	local live = load(h, now)
	if op == 'h' then
		local out = { now }
		for _, l in ipairs(live) do
			out[#out + 1] = l[1]
			out[#out + 1] = l[2]
			out[#out + 1] = l[3]
		end
		return out
	end
	local holder, tok = ARGV[3], tonumber(ARGV[4])
	if op == 'w' then
		tok = tonumber(ARGV[3])
		local held = false
		for _, l in ipairs(live) do
			if l[2] == tok then held = true end
		end
		if not held then
			return { now, 0 }
		end
		local f, field = KEYS[2], ARGV[4]
		local cur = tonumber(redis.call('HGET', f, 't:' .. field) or '0')
		if cur > tok then
			return { now, 0 }
		end
		redis.call('HSET', f, 't:' .. field, tok, 'v:' .. field, ARGV[5])
		return { now, 1 }
	end
	for i, l in ipairs(live) do
		if l[1] == holder and l[2] == tok then
			if op == 'n' then
				l[3] = now + tonumber(ARGV[5])
				redis.call('HSET', h, holder, fmt(tok, l[3]))
				expire(h, live, now, override)
				return { now, 1, l[3] }
			end
			-- 'r'
			redis.call('HDEL', h, holder)
			table.remove(live, i)
			expire(h, live, now, override)
			redis.call('PUBLISH', ARGV[5], ARGV[6])
			return { now, 1 }
		end
	end
	expire(h, live, now, override)
	return { now, 0, 0 }
end
