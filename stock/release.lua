-- Give one reserved unit back, at most once per order, or (ARGV[4] = "retire")
-- end the reservation without giving back a unit the stock row never had.
-- KEYS[1] stock   KEYS[2] orders   KEYS[3] released
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
  if ARGV[4] == 'release' and redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('INCR', KEYS[1])
    redis.call('PUBLISH', ARGV[3], ARGV[2])
  end
  return 1
end
return 0
