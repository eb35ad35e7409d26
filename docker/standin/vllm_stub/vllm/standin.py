"""The stand-in's ``vllm`` command: ``--version`` answers, anything else fails and says why."""

import sys

from vllm import __version__


def main() -> int:
    if sys.argv[1:] in (["--version"], ["-v"]):
        print(__version__)
        return 0
    print(
        "vllm: this is CI's stand-in for vLLM's image (docker/standin); it serves no model",
        file=sys.stderr,
    )
    return 1
