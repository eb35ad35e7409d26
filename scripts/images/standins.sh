#!/usr/bin/env bash
# Builds the stand-in base images, once per machine (kept in the cache; rebuilt only when this
# script or its inputs change):
#   - python:3.11-slim-bookworm's stand-in: a Debian bookworm root made by debootstrap from
#     the apt mirror this machine uses, with CPython 3.11, pip and venv, `python` and `pip` on
#     PATH, the official image's pip, and no EXTERNALLY-MANAGED marker (it has none);
#   - vllm/vllm-openai's stand-in (docker/standin/vllm.Dockerfile) on an Ubuntu 24.04 root
#     made by debootstrap from Ubuntu's archive, whose CPython is 3.12 as in vLLM's image
#     (its Release file checked against Ubuntu's 2018 archive key, pinned by fingerprint
#     below): a virtualenv on PATH holding what vLLM's image brings that the agent leans on,
#     and a `vllm` entry point.
# The machine's own trusted CAs go in too: its egress re-signs TLS, and pip inside a build
# step must trust what pip outside it trusts. Usage: scripts/images/standins.sh VLLM_VERSION
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
source "$here/buildah.sh"
vllm_version="${1:?usage: standins.sh VLLM_VERSION}"
OFFICIAL_PIP=24.0
UBUNTU_ARCHIVE="${UBUNTU_ARCHIVE:-http://archive.ubuntu.com/ubuntu}"
UBUNTU_SUITE=noble
# "Ubuntu Archive Automatic Signing Key (2018) <ftpmaster@ubuntu.com>": the key that signs
# noble's Release file. The keyring package is fetched from the archive it vouches for, so
# only a key with this fingerprint is taken from it.
UBUNTU_ARCHIVE_KEY=F6ECB3762474EDA9D21B7022871920D1991BC93C

# What the bases are made of: a change to any of these makes new stand-ins. Each file is
# hashed with its path relative to its own folder, in a fixed order, so every checkout of the
# same commit (CI's fresh clone included) finds the bases the others built.
inputs_digest() {
  {
    (cd "$root" && find scripts/images/standins.sh scripts/images/buildah.sh docker/standin \
       -type f -not -name '*.pyc' | LC_ALL=C sort | xargs sha256sum)
    (cd /usr/local/share/ca-certificates && find . -type f | LC_ALL=C sort | xargs -r sha256sum)
  } | sha256sum | cut -c1-16
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

ubuntu_keyring() {
  # Ubuntu's archive key, out of the ubuntu-keyring package of the suite's own index, kept
  # only if its fingerprint is the pinned one. Prints the keyring's path.
  local work="$IMAGES_CACHE/ubuntu-keyring" deb
  rm -rf "$work" && mkdir -p "$work" && chmod 700 "$work"
  deb="$(curl -fsS "$UBUNTU_ARCHIVE/dists/$UBUNTU_SUITE/main/binary-amd64/Packages.xz" | xz -dc \
         | awk '/^Package: ubuntu-keyring$/ {found=1} found && /^Filename:/ {print $2; exit}')"
  [ -n "$deb" ] || { echo "standins.sh: no ubuntu-keyring in $UBUNTU_ARCHIVE $UBUNTU_SUITE" >&2; exit 1; }
  curl -fsS -o "$work/keyring.deb" "$UBUNTU_ARCHIVE/$deb"
  dpkg-deb -x "$work/keyring.deb" "$work/x"
  gpg --quiet --homedir "$work" --import "$work/x/usr/share/keyrings/ubuntu-archive-keyring.gpg" 2>/dev/null
  gpg --quiet --homedir "$work" --export "$UBUNTU_ARCHIVE_KEY" >"$work/pinned.gpg"
  gpg --homedir "$work" --show-keys --with-colons "$work/pinned.gpg" 2>/dev/null \
    | grep -q "^fpr:::::::::$UBUNTU_ARCHIVE_KEY:" \
    || { echo "standins.sh: Ubuntu's archive key $UBUNTU_ARCHIVE_KEY is not in its keyring" >&2; exit 1; }
  echo "$work/pinned.gpg"
}

build_ubuntu_python() {
  log "stand-in $STANDIN_UBUNTU_PYTHON: debootstrap $UBUNTU_SUITE from $UBUNTU_ARCHIVE"
  local ctr mnt keyring
  keyring="$(ubuntu_keyring)"
  ctr="$(bh from scratch)"
  mnt="$(bh mount "$ctr")"
  # Debian's debootstrap knows Ubuntu's suites by the script they all share (gutsy).
  debootstrap --variant=minbase --components=main,universe --keyring="$keyring" \
    --include=python3,python3-venv,python3-pip,ca-certificates \
    "$UBUNTU_SUITE" "$mnt" "$UBUNTU_ARCHIVE" /usr/share/debootstrap/scripts/gutsy \
    >"$IMAGES_CACHE/debootstrap-ubuntu.log" 2>&1 \
    || { tail -20 "$IMAGES_CACHE/debootstrap-ubuntu.log" >&2; exit 1; }
  cp /usr/local/share/ca-certificates/*.crt "$mnt/usr/local/share/ca-certificates/" 2>/dev/null || true
  chroot "$mnt" update-ca-certificates >/dev/null 2>&1
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$mnt/etc/pip.conf"
  rm -rf "$mnt"/var/lib/apt/lists/* "$mnt"/var/cache/apt/*.bin "$mnt"/usr/share/doc/* \
         "$mnt"/usr/share/man/* "$mnt"/usr/share/locale/*
  bh umount "$ctr" >/dev/null
  bh config --env LANG=C.UTF-8 --cmd python3 "$ctr"
  bh commit --quiet --rm "$ctr" "$STANDIN_UBUNTU_PYTHON" >/dev/null
}

build_vllm() {
  log "stand-in $STANDIN_VLLM_REPO:$vllm_version"
  bh build --quiet -f "$root/docker/standin/vllm.Dockerfile" \
    --build-arg BASE_IMAGE="$STANDIN_UBUNTU_PYTHON" --build-arg VLLM_VERSION="$vllm_version" \
    -t "$STANDIN_VLLM_REPO:$vllm_version" "$root/docker/standin" >/dev/null
}

mkdir -p "$IMAGES_CACHE"
if [ -e "$stamp" ] && have_image "$STANDIN_PYTHON" && have_image "$STANDIN_UBUNTU_PYTHON" \
   && have_image "$STANDIN_VLLM_REPO:$vllm_version"; then
  log "stand-ins cached ($digest)"
  exit 0
fi
# Inputs changed (or a first run): start from an empty store, so old bases never pile up.
bh rmi --all --force >/dev/null 2>&1 || true
rm -f "$IMAGES_CACHE"/standins-*
build_python
build_ubuntu_python
build_vllm
touch "$stamp"
