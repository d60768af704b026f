-- Count the stock_left an item should have: the stock row's units (ARGV[2])
-- minus the live reservations whose deduction MySQL does not hold yet
-- (ARGV[5..] are the order ids with an unrestored deduction). Counted inside
-- the script, so no reservation or release slips in between.
-- KEYS[1] stock   KEYS[2] orders   KEYS[3] short   KEYS[4] adds
-- ARGV[1] mode: "warm" sets a missing key (a key that exists is live stock
-- and is left alone), "set" sets it, "check" only counts.
-- ARGV[3] stock events channel   ARGV[4] item id: units that come back by
-- the SET are announced there (sold-out flags clear).
-- More reservations than units (Redis lost writes: a phantom unit) clamp
-- stock_left at 0; the shortfall is kept in KEYS[3] with it, so the next
-- releases cover it instead of putting units on sale the stock row does not
-- have (release.lua).
-- A count that sets (or could set) the key forgets the recorded adds: the
-- stock row it counts from holds every committed add and no other (callers
-- hold the row's lock), so an add whose transaction failed is taken back
-- here, and its undo (unadd.lua) must then find nothing to take back again.
-- Returns {old, want}; old is -1 when the key is missing.
local old = tonumber(redis.call('GET', KEYS[1]) or '-1')
if ARGV[1] == 'warm' and old >= 0 then return {old, old} end
local deducted = {}
for i = 5, #ARGV do deducted[ARGV[i]] = true end
local pending = 0
for _, id in ipairs(redis.call('HKEYS', KEYS[2])) do
  if not deducted[id] then pending = pending + 1 end
end
local want = tonumber(ARGV[2]) - pending
local short = 0
if want < 0 then want, short = 0, -want end
if ARGV[1] ~= 'check' then
  redis.call('DEL', KEYS[4])
  if short > 0 then
    redis.call('SET', KEYS[3], short)
  else
    redis.call('DEL', KEYS[3])
  end
  if old ~= want then
    redis.call('SET', KEYS[1], want)
    if want > old and want > 0 then redis.call('PUBLISH', ARGV[3], ARGV[4]) end
  end
end
return {old, want}
