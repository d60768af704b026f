-- Put back the reservations and the buyer marks of orders MySQL holds a unit
-- for (a Redis that lost them), each only if absent, and never for an order
-- whose unit was released or retired (release.lua): that unit is already
-- back on sale, or was never there. A batch of one is Restore's.
-- KEYS[1] orders   KEYS[2] buyers   KEYS[3] released
-- ARGV: (order id, user id, reservation JSON) per order
-- Returns per order: 1 restored, 0 the reservation was there, -1 refused (released).
local out = {}
for i = 1, #ARGV, 3 do
  local id = ARGV[i]
  if redis.call('SISMEMBER', KEYS[3], id) == 1 then
    out[#out + 1] = -1
  else
    redis.call('HSETNX', KEYS[2], ARGV[i + 1], id)
    out[#out + 1] = redis.call('HSETNX', KEYS[1], id, ARGV[i + 2])
  end
end
return out
