-- ARGV: 1 token, 2 ttl, 3 join, 4 fenced, 5 channel, 6 claim_ms
-- returns {1, fence} held ; {0, pttl, head(0/1)} refused
if redis.call('exists', KEYS[2]) == 0 and
   redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, fence_next(ARGV[4])}
end
local holder = redis.call('get', KEYS[1])
if holder == ARGV[1] then                      -- the claim of a hand-over, or a repeated attempt
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('get', KEYS[4]) or '0')}
end
if not holder then                              -- free, queue not empty: lapsed lease or claim
  holder = hand_over(ARGV[6], ARGV[1])           -- dead entries ahead of us are dropped
  if not holder then                             -- nobody live: the queue is gone, take it
    redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return {1, fence_next(ARGV[4])}
  end
  if holder == ARGV[1] then return {1, fence_next(ARGV[4])} end  -- we were the live head
end
local head = 0
if ARGV[3] == '1' then
  if redis.call('hsetnx', KEYS[3], ARGV[1], ARGV[2] .. ':' .. ARGV[4] .. ':' .. ARGV[5]) == 1 then
    if redis.call('rpush', KEYS[2], ARGV[1]) == 1 then head = 1 end
  elseif redis.call('lindex', KEYS[2], 0) == ARGV[1] then head = 1 end
end
local pttl = -2
if holder then pttl = redis.call('pttl', KEYS[1]) end
return {0, pttl, head}
