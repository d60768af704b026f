-- Add units for sale to a loaded item, at most once per add id.
-- KEYS[1] stock   KEYS[2] adds (hash: add id -> units)   KEYS[3] short
-- ARGV[1] add id  ARGV[2] units
-- While the last recount found more reservations than the stock row had
-- units (count.lua's shortfall), the new units cover that first: only the
-- rest goes on sale. The covered part is recorded (field "<add id>:short")
-- so that unadd.lua gives the shortfall back exactly.
-- Returns the units left after the add, -1 when the item's stock is not
-- loaded (nothing written: a later load derives it from the stock row), or
-- -2 when this add id was already applied (nothing written again).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
local n = tonumber(ARGV[2])
if redis.call('HSETNX', KEYS[2], ARGV[1], n) == 0 then
  return -2
end
local short = tonumber(redis.call('GET', KEYS[3]) or '0')
local cover = math.min(short, n)
if cover > 0 then
  redis.call('HSET', KEYS[2], ARGV[1] .. ':short', cover)
  if short - cover > 0 then
    redis.call('SET', KEYS[3], short - cover)
  else
    redis.call('DEL', KEYS[3])
  end
end
return redis.call('INCRBY', KEYS[1], n - cover)
