-- Give one reserved unit back, at most once per order.
-- KEYS[1] stock   KEYS[2] orders
-- ARGV[1] order id   ARGV[2] item id   ARGV[3] stock events channel
-- Returns 1 when this call released the unit, 0 when it was already released
-- (or never reserved). The buyer's mark stays: one order per buyer per item.
if redis.call('HDEL', KEYS[2], ARGV[1]) == 1 then
  redis.call('INCR', KEYS[1])
  redis.call('PUBLISH', ARGV[3], ARGV[2])
  return 1
end
return 0
