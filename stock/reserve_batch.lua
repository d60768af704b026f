-- Reserve one unit of an item for each of a batch of buyers (one or more),
-- atomically per buyer and in order: a buyer holds at most one order per
-- item, and stock never goes below zero.
-- KEYS[1] stock   KEYS[2] buyers   KEYS[3] orders   KEYS[4] outbox
-- ARGV: (user id, order id, reservation JSON) per buyer
-- Returns a flat list of {code, value} per buyer:
-- 0 units left | 1 sold out | 2 existing order id | 3 not loaded
local out = {}
local left = tonumber(redis.call('GET', KEYS[1]))
for i = 1, #ARGV, 3 do
  local user, id, body = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local existing = redis.call('HGET', KEYS[2], user)
  if existing then
    out[#out + 1] = 2; out[#out + 1] = existing
  elseif left == nil then
    out[#out + 1] = 3; out[#out + 1] = ''
  elseif left <= 0 then
    out[#out + 1] = 1; out[#out + 1] = ''
  else
    left = redis.call('DECR', KEYS[1])
    redis.call('HSET', KEYS[2], user, id)
    redis.call('HSET', KEYS[3], id, body)
    -- The outbox entry is written in the same script as the reservation:
    -- there is no moment at which a unit is reserved and no entry will ever
    -- carry it.
    redis.call('XADD', KEYS[4], '*', 'order_id', id, 'body', body)
    out[#out + 1] = 0; out[#out + 1] = left
  end
end
return out
