-- Store a view and announce it unless the stored view is further along
-- (order.View.Rank): a saga's late PENDING_PAYMENT never replaces the PAID
-- the door published, and a settled final status is never replaced (but by its refund, rank 4). The
-- key's slot holds the view; PUBLISH needs no key (on Redis Cluster it
-- reaches every node).
-- KEYS[1] view key   ARGV[1] view JSON   ARGV[2] its rank   ARGV[3] TTL (s)   ARGV[4] channel
-- Returns 1 when stored and announced, 0 when the stored view is further along.
local old = redis.call('GET', KEYS[1])
if old then
  local ok, v = pcall(cjson.decode, old)
  if ok and type(v) == 'table' then
    local r = 0
    local st = v['status']
    if st == 'PENDING_PAYMENT' then r = 1
    elseif st == 'PAID' or st == 'CANCELLED' or st == 'FAILED' or st == 'REFUNDED' then
      if v['settling'] == true then r = 2 else r = 3 end
      if r == 3 and type(v['refund_id']) == 'string' and v['refund_id'] ~= '' then r = 4 end
    end
    local new = tonumber(ARGV[2])
    if r > new or (r >= 3 and new == r) then return 0 end
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[3])
redis.call('PUBLISH', ARGV[4], ARGV[1])
return 1
