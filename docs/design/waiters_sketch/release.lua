-- ARGV: 1 token, 2 claim_ms, 3 released channel. Release by the holder, or leave by a waiter.
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  if redis.call('hdel', KEYS[3], ARGV[1]) == 1 and redis.call('lindex', KEYS[2], 0) == ARGV[1] then
    redis.call('lpop', KEYS[2])                  -- the head leaves: the next one takes the duty
    local pttl = redis.call('pttl', KEYS[1])
    if pttl < 0 then hand_over(ARGV[2], false) else notify_head(pttl) end
  end                                            -- others leave lazily: skipped when popped
  return 0
end
if redis.call('exists', KEYS[2]) == 1 then
  if hand_over(ARGV[2], false) then return 2 end  -- hand_over freed the key if nobody lives
else
  redis.call('del', KEYS[1])
end
redis.call('publish', ARGV[3], ARGV[1])
return 1
