"""What a Hugging Face repository id and revision may look like: one rule for the site's
model registry, a speculative draft model and a LoRA adapter.

Guarantee: ``hf_repo_problem`` and ``revision_problem`` answer None exactly for the names the
site stores and the agent passes to the hub; a refusal is a sentence for the user."""

from __future__ import annotations

import re

# "owner/name": letters, digits, '-', '_', '.'; at most 96 per part.
_HF_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$")


def hf_repo_problem(hf_repo: object) -> str | None:
    """Why ``hf_repo`` is not a Hugging Face repo id, or None."""
    if not isinstance(hf_repo, str) or not _HF_REPO.match(hf_repo):
        return "Expected a Hugging Face repo id like 'meta-llama/Llama-3.1-8B-Instruct'."
    if ".." in hf_repo:
        return "A repo id cannot contain '..'."
    return None


def revision_problem(revision: object) -> str | None:
    """Why ``revision`` is not a branch, tag or commit of a repo, or None."""
    if not isinstance(revision, str) or not _REVISION.match(revision) or ".." in revision:
        return "Expected a branch, tag or commit hash."
    return None
