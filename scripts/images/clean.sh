#!/usr/bin/env bash
# After a run of the images: removes every working container and every image but the
# stand-in bases, so CI's store holds the cached bases and nothing that grows.
set -uo pipefail
source "$(dirname "$0")/buildah.sh"
bh rm --all >/dev/null 2>&1
bh images --format '{{.Name}}:{{.Tag}} {{.ID}}' 2>/dev/null | while read -r name id; do
  case "$name" in "$STANDIN_PREFIX"/*) ;; *) bh rmi --force "$id" >/dev/null 2>&1 ;; esac
done
bh rmi --prune >/dev/null 2>&1
exit 0
