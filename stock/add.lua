-- Add units for sale to a loaded item, at most once per add id.
-- KEYS[1] stock   KEYS[2] adds (hash: add id -> units)
-- ARGV[1] add id  ARGV[2] units
-- Returns the units left after the add, -1 when the item's stock is not
-- loaded (nothing written: a later load derives it from the stock row), or
-- -2 when this add id was already applied (nothing written again).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 0 then
  return -2
end
return redis.call('INCRBY', KEYS[1], ARGV[2])
