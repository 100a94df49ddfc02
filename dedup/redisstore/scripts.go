package redisstore

// The scripts. Times are microseconds since the epoch, passed and stored
// as decimal strings and compared as numbers (exact below 2^53); versions
// are written with %d so that no exponent ever appears in one.

// claimScript: KEYS[1] the record; ARGV status, owner, payload hash,
// response, now, expires, the limit a lease must be past (now - margin),
// the key's expiry (ms). Returns {1, version, attempts, old fields} when it
// wrote, {0, old fields} when the record is live.
const claimScript = `
local k = KEYS[1]
local old = redis.call('HGETALL', k)
local version, attempts = 1, 0
if #old > 0 then
  local h = {}
  for i = 1, #old, 2 do h[old[i]] = old[i + 1] end
  local limit = ARGV[5]
  if h.status == 'PENDING' then limit = ARGV[7] end
  if tonumber(h.expires_at) >= tonumber(limit) then
    return {0, old}
  end
  version = tonumber(h.version) + 1
  -- failed runs carry over a takeover; past a COMPLETED record's retention a key is a new message
  if h.status ~= 'COMPLETED' then attempts = tonumber(h.attempts) end
end
redis.call('HSET', k, 'status', ARGV[1], 'version', string.format('%d', version), 'owner', ARGV[2],
  'payload_hash', ARGV[3], 'response', ARGV[4], 'attempts', string.format('%d', attempts),
  'last_error', '', 'created_at', ARGV[5], 'expires_at', ARGV[6])
redis.call('PEXPIREAT', k, ARGV[8])
return {1, version, attempts, old}
`

// fence is the head of the scripts that act on a held lease: ARGV[1] the
// owner, ARGV[2] the version.
const fence = `
local k = KEYS[1]
local h = redis.call('HMGET', k, 'status', 'owner', 'version', 'attempts', 'expires_at')
if h[1] ~= 'PENDING' or h[2] ~= ARGV[1] or tonumber(h[3]) ~= tonumber(ARGV[2]) then
  return 0
end
local version = string.format('%d', tonumber(h[3]) + 1)
`

// completeScript: ARGV owner, version, response, expires, key expiry (ms).
const completeScript = fence + `
redis.call('HSET', k, 'status', 'COMPLETED', 'version', version, 'response', ARGV[3], 'expires_at', ARGV[4], 'last_error', '')
redis.call('PEXPIREAT', k, ARGV[5])
return 1
`

// failScript: ARGV owner, version, reason, retry at, key expiry (ms),
// reset ('1' or '0'), refund ('1' or '0'), the status to write (FAILED, or
// DEAD_LETTER for a dead letter kept in the store).
const failScript = fence + `
local attempts = tonumber(h[4])
if ARGV[6] == '1' then attempts = 0 elseif ARGV[7] ~= '1' then attempts = attempts + 1 end
redis.call('HSET', k, 'status', ARGV[8], 'version', version, 'last_error', ARGV[3], 'expires_at', ARGV[4],
  'attempts', string.format('%d', attempts))
redis.call('PEXPIREAT', k, ARGV[5])
return 1
`

// extendScript: ARGV owner, version, lease until, key expiry (ms). A
// lease only moves forward.
const extendScript = fence + `
if tonumber(ARGV[3]) > tonumber(h[5]) then
  redis.call('HSET', k, 'expires_at', ARGV[3])
  redis.call('PEXPIREAT', k, ARGV[4])
end
return 1
`
