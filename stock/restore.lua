-- Put back the reservation and the buyer mark of an order MySQL holds a unit
-- for (a Redis that lost them), each only if absent, and never for an order
-- whose unit was released or retired (release.lua): that unit is already
-- back on sale, or was never there.
-- KEYS[1] orders   KEYS[2] buyers   KEYS[3] released
-- ARGV[1] order id   ARGV[2] user id   ARGV[3] reservation JSON
-- Returns 1 restored, 0 the reservation was there, -1 refused (released).
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then
  return -1
end
redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[1])
return redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[3])
