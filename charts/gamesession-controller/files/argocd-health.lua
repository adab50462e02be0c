-- Argo CD health check for games.example.com/GameSession.
--
-- Install it under the key
--   resource.customizations.health.games.example.com_GameSession
-- of the argocd-cm ConfigMap (docs/operations.md, "GitOps health", shows how).
--
-- It reads the same conditions as kstatus and Flux: a session whose status is
-- for an older generation is Progressing; Stalled=True is Degraded (the
-- controller cannot go on until someone changes something, and the message
-- says what); Reconciling=True is Progressing, or Suspended while its
-- profile's rollout is paused; otherwise the Ready condition decides.
local health = {}

local function result(status, message)
  health.status = status
  health.message = message
  return health
end

if obj.status == nil then
  return result("Progressing", "Waiting for the controller to report the session's status")
end
local generation = obj.metadata.generation
if generation ~= nil and obj.status.observedGeneration ~= generation then
  return result("Progressing", "Waiting for the controller to observe generation " .. tostring(generation))
end

local conditions = {}
if obj.status.conditions ~= nil then
  for _, condition in ipairs(obj.status.conditions) do
    conditions[condition.type] = condition
  end
end

local stalled = conditions["Stalled"]
if stalled ~= nil and stalled.status == "True" then
  return result("Degraded", stalled.reason .. ": " .. (stalled.message or ""))
end
local reconciling = conditions["Reconciling"]
if reconciling ~= nil and reconciling.status == "True" then
  if reconciling.reason == "RolloutPaused" then
    return result("Suspended", reconciling.message or "The profile's rollout is paused")
  end
  return result("Progressing", reconciling.message or reconciling.reason)
end
local ready = conditions["Ready"]
if ready ~= nil and ready.status == "True" then
  return result("Healthy", ready.message or "Ready")
end
if ready ~= nil then
  return result("Progressing", ready.message or ready.reason)
end
return result("Progressing", "Waiting for the controller to report readiness")
