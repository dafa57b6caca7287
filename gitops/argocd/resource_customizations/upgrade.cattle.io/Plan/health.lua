-- A Plan of system-upgrade-controller or slipway. slipway writes kstatus' Ready, Reconciling and
-- Stalled; SUC writes only Validated, LatestResolved and Complete, read when the others are absent.
-- A rollout held on purpose (its window closed, its version younger than minVersionAge, a
-- DisruptionBudget halted or frozen by its schedule) is Suspended: it goes on by itself, nothing
-- is wrong.
local hs = {}
local suspended = { Waiting = true, VersionTooNew = true, Halted = true, Frozen = true }

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
  hs.message = "Waiting for the controller to report the Plan's status"
  return hs
end
local observed = obj.status.observedGeneration
if observed ~= nil and obj.metadata.generation ~= nil and observed < obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the controller to observe generation " .. tostring(obj.metadata.generation)
  return hs
end

local stalled = condition("Stalled")
local ready = condition("Ready")
local reconciling = condition("Reconciling")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = said(stalled, "The rollout cannot go on")
  return hs
end
if ready ~= nil and ready.status == "True" then
  if suspended[ready.reason] then
    hs.status = "Suspended"
  else
    hs.status = "Healthy"
  end
  hs.message = said(ready, "Every selected node is upgraded")
  return hs
end
if reconciling ~= nil and reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = said(reconciling, "Upgrading nodes")
  return hs
end

-- Conditions as system-upgrade-controller writes them.
local validated = condition("Validated")
local complete = condition("Complete")
local resolved = condition("LatestResolved")
if validated ~= nil and validated.status == "False" then
  hs.status = "Degraded"
  hs.message = said(validated, "The Plan is not valid")
  return hs
end
if resolved ~= nil and resolved.status == "False" and resolved.reason == "Error" then
  hs.status = "Degraded"
  hs.message = said(resolved, "The Plan's version cannot be resolved")
  return hs
end
if complete ~= nil and complete.status == "True" then
  hs.status = "Healthy"
  hs.message = said(complete, "Every selected node is upgraded")
  return hs
end
hs.status = "Progressing"
if complete ~= nil then
  hs.message = said(complete, "Upgrading nodes")
else
  hs.message = "Waiting for the controller to report the Plan's status"
end
return hs
