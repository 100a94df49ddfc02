package redisstore

// The scripts, for the calls a plain command cannot make atomic. A new
// key needs none (SET NX); each script reads the record's string,
// decides and writes it back whole, with the key's expiry (PXAT, ms).
// Heads and versions come from Go (the lease names them); the scripts
// read only the numbers after the head (record.go has the layout).

// takeoverScript: KEYS[1] the record; ARGV the value the claimer read
// (expired), the record to write, the key's expiry. It writes only while
// the record is still the one read, and returns 1 when it wrote.
const takeoverScript = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3])
return 1
`

// fence is the start of the scripts that act on a held lease: ARGV[1] the
// head the lease expects (PENDING, its version and owner), after the
// layout byte (lay: '2' when the record counts takeovers, else '1'; p is
// where the fields after the head start). What follows the head each
// script reads with one pattern of as few captures as it needs: a capture
// costs the server more than the rest of the script.
const fence = `
local k, head = KEYS[1], ARGV[1]
local v = redis.call('GET', k)
if not v or string.sub(v, 2, #head + 1) ~= head then
  return 0
end
local lay, p = string.sub(v, 1, 1), #head + 2
if lay ~= '1' and lay ~= '2' then
  return 0
end
`

// corrupt is a script's reply to a record it cannot read.
const corrupt = `return redis.error_reply('CORRUPT onceq record')`

// completeScript: ARGV head, the COMPLETED head, expires, response, key
// expiry. The layout, attempts, takeovers, created and the hash stay (e is
// where the numbers start, i where the hash does); the last error clears.
const completeScript = fence + `
local e, hl, i
if lay == '1' then
  e, hl, i = string.match(v, '^%-?%d+():%d+:%-?%d+:(%d+):()', p)
else
  e, hl, i = string.match(v, '^%-?%d+():%d+:%d+:%-?%d+:(%d+):()', p)
end
if not i or i + hl > #v + 1 then
  ` + corrupt + `
end
redis.call('SET', k, lay .. ARGV[2] .. ARGV[3] .. string.sub(v, e, i + hl - 1) .. '0:' .. ARGV[4], 'PXAT', ARGV[5])
return 1
`

// failScript: ARGV head, the FAILED (or DEAD_LETTER) head, retry at, key
// expiry, the reason as stored (length, ':', text), reset ('1' or '0'),
// refund ('1' or '0'). Takeovers (reset clears them, and the layout with
// them), created, the hash and the response stay.
const failScript = fence + `
local att, tk, c, hl, i
if lay == '1' then
  att, c, hl, i = string.match(v, '^%-?%d+:(%d+):()%-?%d+:(%d+):()', p)
else
  att, tk, c, hl, i = string.match(v, '^%-?%d+:(%d+):(%d+:)()%-?%d+:(%d+):()', p)
end
local el, j
if i and i + hl <= #v + 1 then
  el, j = string.match(v, '^(%d+):()', i + hl)
end
if not j or j + el > #v + 1 then
  ` + corrupt + `
end
local a = tonumber(att)
if ARGV[6] == '1' then a, lay, tk = 0, '1', '' elseif ARGV[7] ~= '1' then a = a + 1 end
redis.call('SET', k, lay .. ARGV[2] .. ARGV[3] .. ':' .. string.format('%d', a) .. ':' .. (tk or '') .. string.sub(v, c, i + hl - 1) ..
  ARGV[5] .. string.sub(v, j + el), 'PXAT', ARGV[4])
return 1
`

// extendScript: ARGV head, lease until, key expiry. A lease only moves
// forward.
const extendScript = fence + `
local exp, e = string.match(v, '^(%-?%d+)():', p)
if not e then
  ` + corrupt + `
end
if tonumber(ARGV[2]) > tonumber(exp) then
  redis.call('SET', k, lay .. head .. ARGV[2] .. string.sub(v, e), 'PXAT', ARGV[3])
end
return 1
`
