-- A kairos-operator NodeOpUpgrade, run by slipway through the NodeOp of its name: Progressing while
-- that NodeOp runs, Healthy once it completed, Degraded when it failed or is not the upgrade's own.
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
  hs.message = "Waiting for the controller to report the NodeOpUpgrade's status"
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
  hs.message = said(stalled, "The upgrade failed")
  return hs
end
local ready = condition("Ready")
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = said(ready, "Every selected node is upgraded")
  return hs
end
local reconciling = condition("Reconciling")
hs.status = "Progressing"
if reconciling ~= nil and reconciling.status == "True" then
  hs.message = said(reconciling, "Upgrading the nodes")
else
  hs.message = "Waiting for the controller to report the NodeOpUpgrade's status"
end
return hs
