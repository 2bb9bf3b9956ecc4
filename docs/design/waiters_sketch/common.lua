-- Sketch for docs/design/waiters.md (proposed, not built): not the library's scripts. Run by sim.py.
-- KEYS: 1 key, 2 queue (list of tokens), 3 queue info (hash token -> "ttl:fenced:channel"), 4 fence
local function fence_next(fenced)
  if fenced == '1' then return redis.call('incr', KEYS[4]) end
  return 0
end
-- Tells the first live waiter it is the head (it watches the lease end, ms from now); waiters that
-- left (no info) or whose process is gone (0 receivers) are popped on the way.
local function notify_head(ms)
  while true do
    local h = redis.call('lindex', KEYS[2], 0)
    if not h then return end
    local hi = redis.call('hget', KEYS[3], h)
    if hi and redis.call('publish', string.match(hi, '^%d+:[01]:(.+)$'),
                          'h:' .. redis.sha1hex(h) .. ':' .. ms) > 0 then return end
    redis.call('lpop', KEYS[2]); redis.call('hdel', KEYS[3], h)
  end
end
-- Hands the (free) key to the first live waiter (or to `self`, the caller, if it comes first),
-- or frees it. A grant to another process lives claim_ms until claimed. Returns the grantee or false.
local function hand_over(claim_ms, self)
  local f = '0'
  while true do
    local w = redis.call('lpop', KEYS[2])
    if not w then break end
    local info = redis.call('hget', KEYS[3], w)
    if info then
      redis.call('hdel', KEYS[3], w)
      local ttl, fenced, channel = string.match(info, '^(%d+):([01]):(.+)$')
      if w == self then
        redis.call('set', KEYS[1], w, 'PX', ttl)
        return w
      end
      redis.call('set', KEYS[1], w, 'PX', math.min(tonumber(ttl), tonumber(claim_ms)))
      if fenced == '1' and f == '0' then f = tostring(redis.call('incr', KEYS[4])) end
      if redis.call('publish', channel, 'g:' .. redis.sha1hex(w) .. ':' .. f) > 0 then
        notify_head(claim_ms)
        return w
      end
    end
  end
  redis.call('del', KEYS[1])
  return false
end
