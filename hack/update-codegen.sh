#!/usr/bin/env bash
# Regenerates everything generated in this repository, and nothing else writes it:
#   - deepcopy and register functions   pkg/apis/games/v1/zz_generated.*.go
#   - clientset (with watch and apply configurations), listers, informers   pkg/generated/
#   - the CustomResourceDefinition, from the Go types' markers   artifacts/crd/
#     and its copy in the Helm chart   charts/gamesession-controller/crds/
#
# The generators come from the versions pinned in hack/tools/codegen/go.mod, a
# tools module kept out of the controller's own dependency graph. They are
# resolved through the module cache (`go mod download` fetches them), so the
# script works from a fresh clone with nothing but Go installed.
set -o errexit -o nounset -o pipefail

root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
tools="${root}/hack/tools/codegen"
module=github.com/example/gamesession-controller
boilerplate="${root}/hack/boilerplate.go.txt"

# Generator binaries go to the project's ignored bin/ folder, not to ~/go/bin.
export GOBIN="${root}/bin/codegen"
mkdir -p "${GOBIN}"

codegen_dir=$(cd "${tools}" && go mod download k8s.io/code-generator && go list -m -f '{{.Dir}}' k8s.io/code-generator)
# shellcheck source=/dev/null
source "${codegen_dir}/kube_codegen.sh"

cd "${root}"
# kube_codegen.sh greps these folders for stale files before writing them.
mkdir -p pkg/generated/{applyconfiguration,clientset,listers,informers}
kube::codegen::gen_helpers --boilerplate "${boilerplate}" pkg/apis
kube::codegen::gen_register --boilerplate "${boilerplate}" pkg/apis
kube::codegen::gen_client \
  --with-watch \
  --with-applyconfig \
  --output-dir pkg/generated \
  --output-pkg "${module}/pkg/generated" \
  --boilerplate "${boilerplate}" \
  pkg/apis

(cd "${tools}" && go build -o "${GOBIN}/controller-gen" sigs.k8s.io/controller-tools/cmd/controller-gen)
rm -rf artifacts/crd
"${GOBIN}/controller-gen" crd:crdVersions=v1,generateEmbeddedObjectMeta=true paths=./pkg/apis/... output:crd:dir=./artifacts/crd
# The pod template's lists and strings get bounds, without which the API
# server refuses the CEL rules over them as too costly (see crdlimits).
(cd "${tools}" && go build -o "${GOBIN}/crdlimits" ./crdlimits)
"${GOBIN}/crdlimits" artifacts/crd/games.example.com_gamesessions.yaml
# Helm installs CRDs from the chart's crds/ folder and cannot reach outside
# the chart, so the chart carries a copy.
rm -rf charts/gamesession-controller/crds
cp -r artifacts/crd charts/gamesession-controller/crds
