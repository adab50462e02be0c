#!/usr/bin/env bash
# Builds the local control plane used by the integration tests, the benchmarks
# and `make run`: etcd, kube-apiserver, kube-controller-manager, kube-scheduler
# and kwok, at the exact versions pinned in hack/tools/{kube,kwok}/go.mod.
#
# Each tools module is its own Go module so that k8s.io/kubernetes (and its 31
# replace lines) never enters the controller's dependency graph.
#
# A build is skipped when its binaries exist and were produced from the same
# go.mod/go.sum (a stamp file records their hash), so only the first run pays
# the several minutes a cold build of kube-apiserver costs.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${CONTROLPLANE_BIN_DIR:-"${root}/bin/controlplane"}
mkdir -p "${out}"

# build MODULE_DIR NAME... : build the `tool` packages of a tools module.
build() {
  local module=$1; shift
  local stamp="${out}/.stamp-$(basename "${module}")"
  local want
  want=$(cat "${module}/go.mod" "${module}/go.sum" | sha256sum | cut -d' ' -f1)
  local missing=0 name
  for name in "$@"; do [[ -x "${out}/${name}" ]] || missing=1; done
  if [[ ${missing} == 0 && -f ${stamp} && $(cat "${stamp}") == "${want}" ]]; then
    echo "control plane: $* up to date"
    return
  fi
  echo "control plane: building $* from $(basename "${module}") (a cold build takes several minutes)..."
  local start=${SECONDS}
  # `go build tool` builds every package named by the module's tool directives.
  (cd "${module}" && go build -trimpath -o "${out}/" tool)
  # etcd's main package is go.etcd.io/etcd/server/v3, which Go names "server".
  if [[ -x "${out}/server" ]]; then mv -f "${out}/server" "${out}/etcd"; fi
  echo "${want}" > "${stamp}"
  echo "control plane: built $* in $((SECONDS - start))s"
}

build "${root}/hack/tools/kube" etcd kube-apiserver kube-controller-manager kube-scheduler
build "${root}/hack/tools/kwok" kwok
# The kwok module ships the Stage objects kwok needs to move fake nodes and pods
# through their lifecycle; copy them next to the binary so tests need no module cache.
stages=$(cd "${root}/hack/tools/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
{
  for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    cat "${stages}/${f}"; echo '---'
  done
  # This project's own stages (see each file).
  for f in "${root}"/hack/kwok/*.yaml; do
    cat "${f}"; echo '---'
  done
} > "${out}/kwok-stages.yaml"
