-- Give one reserved unit back, at most once per order, or (ARGV[4] = "retire")
-- end the reservation without giving back a unit the stock row never had.
-- KEYS[1] stock   KEYS[2] orders   KEYS[3] released   KEYS[4] short
-- ARGV[1] order id   ARGV[2] item id   ARGV[3] stock events channel   ARGV[4] "release" | "retire"
-- Returns 1 when this call removed the reservation, 0 when it was already gone
-- (or never made). Either way the order joins the released set: its unit is
-- never put back by a repair (restore.lua), so no interleaving of sagas and
-- repairs gives it back twice. The buyer's mark stays: one order per buyer
-- per item.
redis.call('SADD', KEYS[3], ARGV[1])
if redis.call('HDEL', KEYS[2], ARGV[1]) == 1 then
  -- A lost stock key stays lost: INCR would create it with 1 and the
  -- warmup (warm script) would take it for live stock. The warmup counts
  -- this unit from the stock row instead.
  if redis.call('EXISTS', KEYS[1]) == 0 then return 1 end
  -- While the last recount found more reservations than the stock row has
  -- units (count.lua), one reservation fewer covers that shortfall: the
  -- unit is not on sale, whether it was deducted and restored or never
  -- deducted (an early cancel or time-out), released or retired.
  if tonumber(redis.call('GET', KEYS[4]) or '0') > 0 then
    if redis.call('DECR', KEYS[4]) <= 0 then redis.call('DEL', KEYS[4]) end
  elseif ARGV[4] == 'release' then
    redis.call('INCR', KEYS[1])
    redis.call('PUBLISH', ARGV[3], ARGV[2])
  end
  return 1
end
return 0
