"""The words after ``vllm serve``: one order for the benchmark and the deployment recipe.

Guarantee: the agent starts each trial's vLLM with ``serve_command_args`` and the site's
recipe (``runs/recipes.py``) writes its command with the same function, so the two differ only
in the address they listen on and the executable's path.
"""

from __future__ import annotations

from collections.abc import Sequence


def serve_command_args(
    *,
    model: str,
    revision: str | None,
    served_model_name: str,
    host: str,
    port: int,
    flags: Sequence[str],
    trust_remote_code: bool = False,
) -> list[str]:
    """``MODEL [--revision REV] --host H --port P --served-model-name NAME
    [--trust-remote-code] FLAGS…``; no revision for a model given as a local folder (a folder
    has none)."""
    return [
        model,
        *(["--revision", revision] if revision else []),
        "--host",
        host,
        "--port",
        str(port),
        "--served-model-name",
        served_model_name,
        *(["--trust-remote-code"] if trust_remote_code else []),
        *flags,
    ]
