#!/usr/bin/env bash
# Builds and pushes the site's and the agent's images with the commands docs/operating.md
# gives operators — the block after its "scripts/images/build.sh runs the block below" line,
# run as written — except that `docker` is buildah (chroot isolation, Docker's image format
# as `docker build` makes, HEALTHCHECK included) on CI's store, REGISTRY is CI's local name,
# and the bases are the stand-ins standins.sh builds (the Dockerfiles' PYTHON_IMAGE and
# VLLM_IMAGE arguments; their defaults stay the real images). A push goes to an OCI layout on
# this machine, removed afterwards.
# Prints the two images built as BENCHSITE_TEST_SITE_IMAGE=… and BENCHSITE_TEST_AGENT_IMAGE=…
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
source "$here/buildah.sh"
cd "$root"

block="$(awk '/scripts\/images\/build.sh runs the block below/ {found=1; next}
              found && /^```sh/ {inside=1; next}
              inside && /^```/ {exit}
              inside {print}' docs/operating.md)"
[ -n "$block" ] || { echo "docs/operating.md: the block build.sh runs is missing" >&2; exit 1; }
grep -q '^REGISTRY=' <<<"$block" || { echo "docs/operating.md: the block sets no REGISTRY" >&2; exit 1; }
vllm_version="$(grep -oP '^VLLM_VERSION=\K\S+' <<<"$block")"

"$here/standins.sh" "$vllm_version"

pushed="$(mktemp -d)"
trap 'rm -rf "$pushed"' EXIT
docker() {
  local verb="$1"; shift
  case "$verb" in
    build)
      log "build $*"
      bh build --quiet --format docker \
        --build-arg PYTHON_IMAGE="$STANDIN_PYTHON" --build-arg VLLM_IMAGE="$STANDIN_VLLM_REPO" \
        "$@" >/dev/null ;;
    push)
      log "push $1"
      bh push --quiet --disable-compression "$1" "oci:$pushed/layout:$1" ;;
    *) echo "build.sh: docs/operating.md runs docker $verb, which CI does not stand in for" >&2
       return 1 ;;
  esac
}
# The documented lines, CI's registry name in place of the operator's.
eval "$(sed 's|^REGISTRY=.*|REGISTRY=localhost/benchsite-ci|' <<<"$block")"

echo "BENCHSITE_TEST_SITE_IMAGE=$REGISTRY/site:latest"
echo "BENCHSITE_TEST_AGENT_IMAGE=$REGISTRY/agent:$vllm_version"
