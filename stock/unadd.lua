-- Take back the units of an add whose MySQL transaction did not commit, at
-- most once: only if the add id is still recorded (a fenced recount since the
-- failed commit counted from the stock row, took the units back and forgot
-- every add: nothing is left to undo).
-- KEYS[1] stock   KEYS[2] adds   KEYS[3] short
-- ARGV[1] add id
-- Returns 1 when this call took the units back, 0 when there was nothing to undo.
local n = redis.call('HGET', KEYS[2], ARGV[1])
if not n then
  return 0
end
local cover = tonumber(redis.call('HGET', KEYS[2], ARGV[1] .. ':short') or '0')
redis.call('HDEL', KEYS[2], ARGV[1], ARGV[1] .. ':short')
redis.call('DECRBY', KEYS[1], tonumber(n) - cover)
if cover > 0 then redis.call('INCRBY', KEYS[3], cover) end
return 1
