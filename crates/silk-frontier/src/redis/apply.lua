-- Applies a Silk frontier write if this handle still owns the frontier (redis.rs, APPLY).
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner ~= ARGV[1] then
  return redis.error_reply('SILKFENCED frontier adopted by another owner (epoch ' .. tostring(owner) .. ', this handle ' .. ARGV[1] .. ')')
end
local n = #ARGV
local i = 2
while i <= n do
  local op = ARGV[i]
  local w = 0
  if op == 'H' then w = 4 elseif op == 'D' or op == 'S' or op == 'I' then w = 3 elseif op == 'N' then w = 2 end
  if w == 0 or i + w - 1 > n then
    return redis.error_reply('ERR silk frontier: malformed op list')
  end
  if (op == 'H' or op == 'D' or op == 'S') and KEYS[tonumber(ARGV[i + 1]) or 0] == nil then
    return redis.error_reply('ERR silk frontier: bad key index')
  end
  i = i + w
end
local seqs = {}
i = 2
while i <= n do
  local op = ARGV[i]
  if op == 'H' then
    redis.call('HSET', KEYS[tonumber(ARGV[i + 1])], ARGV[i + 2], ARGV[i + 3])
    i = i + 4
  elseif op == 'D' then
    redis.call('HDEL', KEYS[tonumber(ARGV[i + 1])], ARGV[i + 2])
    i = i + 3
  elseif op == 'S' then
    redis.call('SADD', KEYS[tonumber(ARGV[i + 1])], ARGV[i + 2])
    i = i + 3
  elseif op == 'I' then
    redis.call('HINCRBY', KEYS[1], ARGV[i + 1], ARGV[i + 2])
    i = i + 3
  else
    local s = redis.call('HINCRBY', KEYS[1], 'next_seq', 1) - 1
    redis.call('HSET', KEYS[2], string.format('%d', s), ARGV[i + 1])
    seqs[#seqs + 1] = s
    i = i + 2
  end
end
return seqs
