# Sourced by the scripts beside it: one buildah, one store, one place for the cache.
#
# Every image CI builds lives in a store of its own under IMAGES_CACHE (default
# ~/.cache/benchsite/images), never in the machine's default one: the stand-in bases stay there
# between runs, the images built from the repository are removed after each run, so the
# cache holds the bases and nothing that grows (docs/testing.md, "The images").
# overlay storage and chroot isolation: no daemon and no user namespaces (which this sandbox
# lacks); overlay stores each layer once, where vfs copies the whole tree per layer.

IMAGES_CACHE="${IMAGES_CACHE:-$HOME/.cache/benchsite/images}"
STANDIN_PREFIX="localhost/benchsite-standin"
# `buildah build` and `buildah run` both read it.
export BUILDAH_ISOLATION=chroot

bh() {
  buildah --root "$IMAGES_CACHE/storage" --runroot "$IMAGES_CACHE/run" --storage-driver overlay "$@"
}

# The stand-ins' names: python:3.11-slim-bookworm's and vllm/vllm-openai's, under our prefix,
# and the Ubuntu root with Python 3.12 the latter is built on (vLLM's image is Ubuntu's too).
STANDIN_PYTHON="$STANDIN_PREFIX/python:3.11-slim-bookworm"
STANDIN_VLLM_REPO="$STANDIN_PREFIX/vllm-openai"
STANDIN_UBUNTU_PYTHON="$STANDIN_PREFIX/ubuntu-python:3.12-noble"

have_image() { bh inspect --type image "$1" >/dev/null 2>&1; }

log() { printf '[images %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
