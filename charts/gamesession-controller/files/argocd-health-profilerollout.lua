-- Argo CD health check for games.example.com/ProfileRollout.
--
-- Install it under the key
--   resource.customizations.health.games.example.com_ProfileRollout
-- of the argocd-cm ConfigMap (docs/operations.md, "GitOps health", shows how),
-- beside argocd-health.lua for GameSessions.
--
-- A ProfileRollout has no spec (the controller creates it, one per profile,
-- and writes only its status), so there is no generation to wait for. It
-- reads the same conditions as kstatus and Flux: Stalled=True is Degraded
-- (the brake halted the rollout, sessions that cannot progress hold it up,
-- or the target revision cannot be created; the message says which);
-- Reconciling=True is Progressing, or Suspended while the rollout is paused;
-- Complete=True is Healthy.
local health = {}

local function result(status, message)
  health.status = status
  health.message = message
  return health
end

if obj.status == nil or obj.status.conditions == nil then
  return result("Progressing", "Waiting for the controller to record the rollout")
end

local conditions = {}
for _, condition in ipairs(obj.status.conditions) do
  conditions[condition.type] = condition
end

local stalled = conditions["Stalled"]
if stalled ~= nil and stalled.status == "True" then
  return result("Degraded", stalled.reason .. ": " .. (stalled.message or ""))
end
local reconciling = conditions["Reconciling"]
if obj.status.phase == "Paused" or (reconciling ~= nil and reconciling.status == "True" and reconciling.reason == "RolloutPaused") then
  return result("Suspended", obj.status.message or "The profile's rollout is paused")
end
if reconciling ~= nil and reconciling.status == "True" then
  return result("Progressing", reconciling.message or reconciling.reason)
end
local complete = conditions["Complete"]
if complete ~= nil and complete.status == "True" then
  return result("Healthy", complete.message or "Rollout complete")
end
if complete ~= nil then
  return result("Progressing", complete.message or complete.reason)
end
return result("Progressing", obj.status.message or "Waiting for the controller to record the rollout")
