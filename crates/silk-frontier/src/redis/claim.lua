-- Claims a Silk frontier (redis.rs, CLAIM): checks the format, increments epoch, makes it the owner.
local f = redis.call('HGET', KEYS[1], 'format')
if f and f ~= ARGV[1] then
  return redis.error_reply('SILKFORMAT ' .. f)
end
local stored = redis.call('HGET', KEYS[1], 'epoch')
local e
if stored == false then
  e = 1
else
  e = tonumber(stored)
  if e == nil then e = tonumber(ARGV[2]) else e = e + 1 end
end
local es = string.format('%d', e)
redis.call('HSET', KEYS[1], 'format', ARGV[1], 'epoch', es, 'owner', es)
return es
