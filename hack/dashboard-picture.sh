#!/usr/bin/env bash
# Draws the Grafana dashboard (charts/gamesession-controller/files/
# grafana-dashboard.json) from a real run into docs/images/dashboard.svg, the
# picture in docs/operations.md. There is no Grafana here: the picture is
# drawn by hack/tools/dashshot, our renderer, from the dashboard's own queries
# against a real Prometheus server.
#
# What it does (about 8 minutes; the first run also builds Prometheus, a few
# minutes more, and the control plane if `make controlplane` never ran):
#
#   1. builds the Prometheus server pinned in hack/tools/prometheus into
#      bin/tools/ (skipped while a stamp file says go.mod, go.sum and the
#      flags are unchanged, as hack/verify-alerts.sh does for promtool),
#      dashshot, and make run's bin/run-local;
#   2. starts what `make run` starts, a local control plane with the examples
#      of artifacts/examples applied and the controller, with leader election,
#      --watch-secrets and a cluster-wide budget so that those panels have
#      series;
#   3. starts Prometheus scraping the controller's /metrics every second as
#      the job gamesession-controller-metrics, the job the dashboard selects;
#   4. drives traffic with kubectl (this is a doc-generation script, not a
#      test, so kubectl is fine): 55 more sessions over three profiles, paced
#      rollouts of all three (a canary, a budget, busy sessions deferred, a
#      pause, a maintenance window, a broken profile halted by its brake and
#      then fixed), more sessions mid-rollout, and at the end a few sessions
#      deleted and two rollouts left waiting (paused, outside the window);
#   5. renders the window of the run with dashshot, and stops everything it
#      started (a trap on exit, also on Ctrl-C or a failure).
#
# Everything listens on 127.0.0.1, on free ports. Usage:
#
#   hack/dashboard-picture.sh [OUT.svg]      # default docs/images/dashboard.svg
#
# KEEP_WORK=1 keeps the working directory (logs, Prometheus' data) for a look.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
out=${1:-docs/images/dashboard.svg}
tools="${root}/bin/tools"
job=gamesession-controller-metrics
started=${SECONDS}

log() { echo "dashboard-picture [$((SECONDS - started))s]: $*"; }

# --- 1. Build ---------------------------------------------------------------

prom_module="${root}/hack/tools/prometheus"
# The server needs none of Prometheus' service discovery plugins (a static
# target is all it scrapes), so remove_all_sd, as for promtool.
prom_version=$(cd "${prom_module}" && go list -m -f '{{.Version}}' github.com/prometheus/prometheus)
prom_flags=(-trimpath -tags remove_all_sd -ldflags "-X github.com/prometheus/common/version.Version=${prom_version}")
build_prometheus() {
  mkdir -p "${tools}"
  local stamp="${tools}/.stamp-prometheus-server" want
  want=$(cat "${prom_module}/go.mod" "${prom_module}/go.sum" <(echo "${prom_flags[*]}") | sha256sum | cut -d' ' -f1)
  if [[ -x ${tools}/prometheus && -f ${stamp} && $(cat "${stamp}") == "${want}" ]]; then
    return
  fi
  log "building the Prometheus server from hack/tools/prometheus (minutes with a cold build cache)..."
  (cd "${prom_module}" && go build "${prom_flags[@]}" -o "${tools}/" github.com/prometheus/prometheus/cmd/prometheus)
  echo "${want}" > "${stamp}"
}
build_prometheus
(cd hack/tools/dashshot && go build -o "${tools}/dashshot" .)
hack/build-controlplane.sh
version=$(git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null || echo dev)
go build -ldflags "-X github.com/example/gamesession-controller/cmd/gamesession-controller/app.Version=${version}" \
  -o bin/run-local ./hack/run-local

# --- 2. Control plane and controller -----------------------------------------

work=$(mktemp -d "${TMPDIR:-/tmp}/dashboard-picture.XXXXXX")
pids=()
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  # Prometheus first, then run-local, which stops the controller and tears
  # its control plane down on SIGTERM: wait for that to finish.
  local pid
  for pid in "${pids[@]}"; do
    kill -TERM "${pid}" 2>/dev/null || true
    wait "${pid}" 2>/dev/null || true
  done
  if [[ -n ${KEEP_WORK:-} ]]; then
    echo "dashboard-picture: kept ${work}"
  else
    rm -rf "${work}"
  fi
  exit "${status}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# free_port prints a port of 127.0.0.1 that nothing listens on. The machine
# is shared: make run's fixed 8080 may well be taken.
free_port() {
  local port
  for _ in $(seq 100); do
    port=$((20000 + RANDOM % 20000))
    if ! (echo >"/dev/tcp/127.0.0.1/${port}") 2>/dev/null; then
      echo "${port}"
      return
    fi
  done
  echo "dashboard-picture: no free port found" >&2
  return 1
}
metrics_port=$(free_port)
health_port=$(free_port)
prom_port=$(free_port)

# wait_for URL SECONDS PID: until URL answers 2xx; fails at once if the
# process PID, which is to serve it, has exited.
wait_for() {
  local deadline=$((SECONDS + $2))
  until curl -fsS --noproxy '*' -o /dev/null "$1" 2>/dev/null; do
    if ((SECONDS > deadline)) || ! kill -0 "$3" 2>/dev/null; then
      echo "dashboard-picture: $1 not ready after $2s (logs in ${work})" >&2
      KEEP_WORK=1
      return 1
    fi
    sleep 1
  done
}

log "starting the local control plane and the controller (logs: ${work}/run-local.log)"
# As make run does, never against an exported KUBECONFIG.
KUBECONFIG= bin/run-local \
  --metrics-bind-address="127.0.0.1:${metrics_port}" \
  --health-probe-bind-address="127.0.0.1:${health_port}" \
  --leader-elect --watch-secrets --max-moving-sessions=6 \
  >"${work}/run-local.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:${health_port}/readyz" 180 "${pids[0]}"
kubeconfig=$(sed -n 's/^ *export KUBECONFIG=\(.*\)$/\1/p' "${work}/run-local.log" | head -n 1)
[[ -n ${kubeconfig} ]] || { echo "dashboard-picture: no kubeconfig in run-local's output" >&2; exit 1; }
export KUBECONFIG=${kubeconfig}

# --- 3. Prometheus ------------------------------------------------------------

cat >"${work}/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
- job_name: ${job}
  static_configs:
  - targets: ["127.0.0.1:${metrics_port}"]
EOF
log "starting Prometheus on 127.0.0.1:${prom_port}"
"${tools}/prometheus" --config.file="${work}/prometheus.yml" \
  --storage.tsdb.path="${work}/prometheus" \
  --web.listen-address="127.0.0.1:${prom_port}" \
  --log.level=warn >"${work}/prometheus.log" 2>&1 &
pids=("$!" "${pids[@]}")
wait_for "http://127.0.0.1:${prom_port}/-/ready" 60 "${pids[0]}"
window_start=$(date +%s)

# --- 4. Traffic -----------------------------------------------------------------

# sessions PROFILE NAMESPACE PREFIX FROM TO [slow]: GameSessions PREFIX-FROM
# to PREFIX-TO of the profile. "slow" marks their pods for the kwok stage
# that keeps them Pending 30 to 40 s (docs/rollouts.md, "Broken and slow game
# servers on make run"), so a paced rollout has something to wait for.
sessions() {
  local profile=$1 ns=$2 prefix=$3 from=$4 to=$5 slow=${6:-} i
  for ((i = from; i <= to; i++)); do
    echo "---"
    echo "apiVersion: games.example.com/v1"
    echo "kind: GameSession"
    echo "metadata: {name: ${prefix}-${i}, namespace: ${ns}}"
    echo "spec:"
    echo "  profileRef: ${profile}"
    echo "  image: registry.example.com/arena-server:1.4.2"
    echo "  ports: [{name: game, containerPort: 7777}]"
    if [[ -n ${slow} ]]; then
      echo "  template: {metadata: {annotations: {sim.games.example.com/readiness: slow}}}"
    fi
  done
}

# profile NAME NAMESPACE: a profile ConfigMap, labelled so the controller
# sees it.
profile() {
  kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: $1
  namespace: $2
  labels: {games.example.com/profile: "true"}
data:
  server.cfg: |
    max_players = 16
    tick_rate = 64
EOF
}

log "creating sessions: 30 slow ones of arena-standard, 10 of league/arena-ranked, 5 of arena-casual"
kubectl create namespace league >/dev/null
profile arena-ranked league
profile arena-casual default
{
  sessions arena-standard default arena-load 1 30 slow
  sessions arena-ranked league ranked 1 10
  sessions arena-casual default casual 1 5
} | kubectl apply -f - >/dev/null
sleep 60

log "rollout policies: arena-standard paced (canary 1, 25%, busy sessions deferred 90s), arena-ranked in a window, arena-casual braked"
kubectl annotate configmap arena-standard --overwrite >/dev/null \
  rollout.games.example.com/canary=1 \
  rollout.games.example.com/max-rolling=25% \
  rollout.games.example.com/max-defer=90s \
  rollout.games.example.com/progress-deadline=2m
kubectl label gamesession arena-load-28 arena-load-29 arena-load-30 games.example.com/busy=true >/dev/null
# A window that opens two to three minutes from now, for three minutes (UTC).
open=$(( ($(date +%s) + 120 + 59) / 60 * 60 ))
window="$(date -u -d "@${open}" +%H:%M)-$(date -u -d "@$((open + 180))" +%H:%M)"
kubectl -n league annotate configmap arena-ranked --overwrite >/dev/null \
  rollout.games.example.com/max-rolling=50% \
  rollout.games.example.com/window="${window}"
kubectl annotate configmap arena-casual --overwrite >/dev/null \
  rollout.games.example.com/canary=1 \
  rollout.games.example.com/max-failed=0 \
  rollout.games.example.com/progress-deadline=30s
sleep 10

log "editing the three profiles: each rolls out (arena-ranked in its window ${window} UTC; arena-casual to content its game server cannot load)"
kubectl patch configmap arena-standard --type merge -p '{"data":{"motd.txt":"Season 2 starts now."}}' >/dev/null
kubectl -n league patch configmap arena-ranked --type merge -p '{"data":{"server.cfg":"max_players = 10\ntick_rate = 128\n"}}' >/dev/null
# The content the kwok stage pod-never-ready.yaml knows: never Ready, so the
# canary fails at its 30 s deadline and the brake halts the rollout.
kubectl patch configmap arena-casual --type json -p '[{"op":"replace","path":"/data","value":{"game.cfg":"crash-on-start"}}]' >/dev/null
sleep 60

log "pausing arena-standard's rollout for 45s"
kubectl annotate configmap arena-standard rollout.games.example.com/paused=true >/dev/null
sleep 45
kubectl annotate configmap arena-standard rollout.games.example.com/paused- >/dev/null

log "10 more sessions of arena-standard, mid-rollout"
sessions arena-standard default arena-late 1 10 | kubectl apply -f - >/dev/null
sleep 90

log "fixing arena-casual's profile: a new rollout replaces the halted one"
kubectl patch configmap arena-casual --type json -p '[{"op":"replace","path":"/data","value":{"server.cfg":"max_players = 8\n"}}]' >/dev/null
sleep 90

# The run ends with rollouts in progress, so that the stat panels, which
# show the last value, have something to show besides zeros.
log "deleting 8 sessions; last edits: arena-standard paused before it rolls, arena-ranked outside its (moved) window"
kubectl delete gamesession --wait=false arena-late-{3..10} >/dev/null
kubectl annotate configmap arena-standard rollout.games.example.com/paused=true >/dev/null
kubectl patch configmap arena-standard --type merge -p '{"data":{"motd.txt":"Season 2, week 2."}}' >/dev/null
open=$(( ($(date +%s) + 3600) / 60 * 60 ))
kubectl -n league annotate configmap arena-ranked --overwrite >/dev/null \
  rollout.games.example.com/window="$(date -u -d "@${open}" +%H:%M)-$(date -u -d "@$((open + 180))" +%H:%M)"
kubectl -n league patch configmap arena-ranked --type merge -p '{"data":{"server.cfg":"max_players = 10\ntick_rate = 96\n"}}' >/dev/null
sleep 75

# --- 5. The picture ------------------------------------------------------------

window_end=$(date +%s)
mkdir -p "$(dirname "${out}")"
log "rendering ${out}"
"${tools}/dashshot" \
  -dashboard charts/gamesession-controller/files/grafana-dashboard.json \
  -prometheus "http://127.0.0.1:${prom_port}" -job "${job}" \
  -start "${window_start}" -end "${window_end}" -scrape-interval 1s -points 200 \
  -subtitle "hack/dashboard-picture.sh: make run's control plane (kwok nodes), one controller (--leader-elect --watch-secrets --max-moving-sessions=6), Prometheus scraping it every 1s; 59 sessions created, 8 deleted; 3 profiles rolled out: paced, paused, in a window, halted." \
  -out "${out}"
log "done"
