#!/usr/bin/env bash
# Builds the controller image for linux/amd64 and linux/arm64 without a Docker
# engine or a registry (`make image`): hack/tools/image cross-compiles the
# static binary and writes an OCI image layout and a tar of it.
#
# The program is in its own module, hack/tools/image, pinned there, so that
# go-containerregistry never enters the controller's dependency graph.
#
# Environment (all optional):
#   IMAGE              reference the loaders name it after (gamesession-controller:dev)
#   IMAGE_DIR          output directory (bin/image)
#   VERSION, REVISION  OCI labels (git describe --tags --always --dirty; git rev-parse HEAD)
#   SOURCE_DATE_EPOCH  every timestamp in the image (the commit time), so that
#                      the same sources give the same image
#   IMAGE_FLAGS        more flags for the program, e.g. -platforms=linux/amd64
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
image=${IMAGE:-gamesession-controller:dev}
out=${IMAGE_DIR:-"${root}/bin/image"}
mkdir -p "${out}"
out=$(cd "${out}" && pwd)

# Reading git must not take the index lock other git commands may hold.
git_() { GIT_OPTIONAL_LOCKS=0 git -C "${root}" "$@"; }
if [[ -z ${VERSION:-} || -z ${REVISION:-} || -z ${SOURCE_DATE_EPOCH:-} ]]; then
  if ! git_ rev-parse --verify -q HEAD >/dev/null; then
    echo "build-image: not a git checkout with a commit: set VERSION, REVISION and SOURCE_DATE_EPOCH" >&2
    exit 1
  fi
fi
version=${VERSION:-$(git_ describe --tags --always --dirty)}
revision=${REVISION:-$(git_ rev-parse HEAD)}
epoch=${SOURCE_DATE_EPOCH:-$(git_ log -1 --format=%ct)}

# shellcheck disable=SC2086 # IMAGE_FLAGS is a list of flags
(cd "${root}/hack/tools/image" && go run . \
  -repo="${root}" -out="${out}" -tag="${image}" \
  -version="${version}" -revision="${revision}" -source-date-epoch="${epoch}" \
  ${IMAGE_FLAGS:-})

cat <<EOF
Image ${image} (version ${version}):
  OCI layout   ${out}/oci
  OCI archive  ${out}/gamesession-controller.tar
Load or push it:
  docker load -i ${out}/gamesession-controller.tar
  podman load -i ${out}/gamesession-controller.tar
  crane push ${out}/oci <registry>/gamesession-controller:<tag>
EOF
