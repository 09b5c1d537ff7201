-- One live process per member id (SPEC 9.4). Each member instance sends an instance id of its own;
-- the member record keeps the one that joined last. A record without one (written before instance
-- ids existed, or by a protocol-level caller that sends none) belongs to whoever comes next.
-- Whether the record belongs to another instance than the caller's.
local function isOtherInstance(rec, instanceId)
  return rec ~= nil and rec.inst ~= nil and rec.inst ~= '' and rec.inst ~= instanceId
end
