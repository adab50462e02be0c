#!/usr/bin/env bash
# Fails when the generated code or CRD differ from what hack/update-codegen.sh
# produces from the current sources. It regenerates into a scratch copy of the
# tree, so the working tree is never modified.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "${scratch}"' EXIT

tar -C "${root}" --exclude=./bin --exclude=./.git -cf - . | tar -C "${scratch}" -xf -
# Reuse the generator binaries already built in this tree, if any.
[[ -d "${root}/bin/codegen" ]] && mkdir -p "${scratch}/bin" && cp -r "${root}/bin/codegen" "${scratch}/bin/"
"${scratch}/hack/update-codegen.sh" "${scratch}" >/dev/null

status=0
for dir in pkg/apis pkg/generated artifacts/crd charts/gamesession-controller/crds; do
  if ! diff -Nru "${root}/${dir}" "${scratch}/${dir}"; then
    status=1
  fi
done
if [[ ${status} != 0 ]]; then
  echo "Generated files are out of date. Run hack/update-codegen.sh and commit the result." >&2
  exit 1
fi
echo "Generated files are up to date."
