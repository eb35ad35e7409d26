#!/usr/bin/env bash
# Builds the stand-in base images, once per machine (kept in the cache; rebuilt only when this
# script or its inputs change):
#   - python:3.11-slim-bookworm's stand-in: a Debian bookworm root made by debootstrap from
#     the apt mirror this machine uses, with CPython 3.11, pip and venv, `python` and `pip` on
#     PATH, the official image's pip, and no EXTERNALLY-MANAGED marker (it has none);
#   - vllm/vllm-openai's stand-in (docker/standin/vllm.Dockerfile): a virtualenv on PATH
#     holding what vLLM's image brings that the agent leans on, and a `vllm` entry point.
# The machine's own trusted CAs go in too: its egress re-signs TLS, and pip inside a build
# step must trust what pip outside it trusts. Usage: scripts/images/standins.sh VLLM_VERSION
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
source "$here/buildah.sh"
vllm_version="${1:?usage: standins.sh VLLM_VERSION}"
OFFICIAL_PIP=24.0

# What the bases are made of: a change to any of these makes new stand-ins.
inputs_digest() {
  find "$here/standins.sh" "$here/buildah.sh" "$root/docker/standin" /usr/local/share/ca-certificates -type f -not -name '*.pyc' \
    | sort | xargs cat | sha256sum | cut -c1-16
}
digest="$(inputs_digest)"
stamp="$IMAGES_CACHE/standins-$digest-$vllm_version"

mirror() {
  # The first Debian archive in this machine's apt sources (deb822 or one-line format).
  local uri
  uri="$(grep -hs -m1 -oP '^URIs:\s*\K\S+/debian/?$' /etc/apt/sources.list.d/*.sources || true)"
  [ -n "$uri" ] || uri="$(grep -hs -m1 -oP '^deb\s+(\[[^]]*\]\s+)?\K\S+/debian/?(?=\s)' \
                            /etc/apt/sources.list /etc/apt/sources.list.d/*.list || true)"
  echo "${uri:-http://deb.debian.org/debian}"
}

build_python() {
  log "stand-in $STANDIN_PYTHON: debootstrap bookworm from $(mirror)"
  local ctr mnt
  ctr="$(bh from scratch)"
  mnt="$(bh mount "$ctr")"
  debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,python-is-python3,ca-certificates \
    bookworm "$mnt" "$(mirror)" >"$IMAGES_CACHE/debootstrap.log" 2>&1 \
    || { tail -20 "$IMAGES_CACHE/debootstrap.log" >&2; exit 1; }
  cp /usr/local/share/ca-certificates/*.crt "$mnt/usr/local/share/ca-certificates/" 2>/dev/null || true
  chroot "$mnt" update-ca-certificates >/dev/null 2>&1
  # pip in any environment of the image (system, venv) reads /etc/pip.conf: the system store.
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$mnt/etc/pip.conf"
  rm -f "$mnt"/usr/lib/python3*/EXTERNALLY-MANAGED
  ln -sf pip3 "$mnt/usr/bin/pip"
  # slim: no apt lists, no docs, no caches.
  rm -rf "$mnt"/var/lib/apt/lists/* "$mnt"/var/cache/apt/*.bin "$mnt"/usr/share/doc/* \
         "$mnt"/usr/share/man/* "$mnt"/usr/share/locale/*
  bh umount "$ctr" >/dev/null
  # The pip the official image ships (CPython 3.11.14's ensurepip): bookworm's 23.0 cannot
  # read the site's hash lock (an extra of a locked package reads as unpinned).
  bh run "$ctr" -- python3 -m pip install --quiet --no-cache-dir \
    --root-user-action=ignore "pip==$OFFICIAL_PIP" >/dev/null
  bh config --env LANG=C.UTF-8 --cmd python3 "$ctr"
  bh commit --quiet --rm "$ctr" "$STANDIN_PYTHON" >/dev/null
}

build_vllm() {
  log "stand-in $STANDIN_VLLM_REPO:$vllm_version"
  bh build --quiet -f "$root/docker/standin/vllm.Dockerfile" \
    --build-arg PYTHON_IMAGE="$STANDIN_PYTHON" --build-arg VLLM_VERSION="$vllm_version" \
    -t "$STANDIN_VLLM_REPO:$vllm_version" "$root/docker/standin" >/dev/null
}

mkdir -p "$IMAGES_CACHE"
if [ -e "$stamp" ] && have_image "$STANDIN_PYTHON" && have_image "$STANDIN_VLLM_REPO:$vllm_version"; then
  log "stand-ins cached ($digest)"
  exit 0
fi
# Inputs changed (or a first run): start from an empty store, so old bases never pile up.
bh rmi --all --force >/dev/null 2>&1 || true
rm -f "$IMAGES_CACHE"/standins-*
build_python
build_vllm
touch "$stamp"
