-- A slipway RebootPolicy: a standing policy, Healthy while it is in force, also while it reboots
-- nodes (that is what it is for: Ready stays True, the message says which nodes); Degraded when a
-- failure stopped it or its spec is invalid, until someone acts.
local hs = {}

local function condition(type)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == type then
      return c
    end
  end
  return nil
end

local function said(c, otherwise)
  if c.message ~= nil and c.message ~= "" then
    return c.message
  end
  if c.reason ~= nil and c.reason ~= "" then
    return otherwise .. " (" .. c.reason .. ")"
  end
  return otherwise
end

if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the controller to report the RebootPolicy's status"
  return hs
end
local observed = obj.status.observedGeneration
if observed ~= nil and obj.metadata.generation ~= nil and observed < obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the controller to observe generation " .. tostring(obj.metadata.generation)
  return hs
end

local stalled = condition("Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = said(stalled, "The policy is stopped")
  return hs
end
local ready = condition("Ready")
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = said(ready, "The policy is in force")
  return hs
end
local reconciling = condition("Reconciling")
hs.status = "Progressing"
if reconciling ~= nil and reconciling.status == "True" then
  hs.message = said(reconciling, "Waiting for the controller")
else
  hs.message = "Waiting for the controller to report the RebootPolicy's status"
end
return hs
