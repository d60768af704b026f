-- Reserve one unit of an item for one buyer, atomically.
-- KEYS[1] stock   KEYS[2] buyers   KEYS[3] orders   KEYS[4] outbox
-- ARGV[1] user id ARGV[2] order id ARGV[3] reservation JSON
-- Returns {0, units left} | {1, ""} sold out | {2, existing order id} | {3, ""} not loaded
local existing = redis.call('HGET', KEYS[2], ARGV[1])
if existing then
  return {2, existing}
end
local left = tonumber(redis.call('GET', KEYS[1]))
if left == nil then
  return {3, ''}
end
if left <= 0 then
  return {1, ''}
end
left = redis.call('DECR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
-- The outbox entry is written in the same script as the reservation: there is
-- no moment at which a unit is reserved and no entry will ever carry it.
redis.call('XADD', KEYS[4], '*', 'order_id', ARGV[2], 'body', ARGV[3])
return {0, left}
