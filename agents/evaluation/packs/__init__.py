"""Evaluation sets shipped with Benchsite. Each pack is written by the project itself (no
outside data), so the repository's own terms are its only licence; its first line says so."""

from __future__ import annotations

from importlib import resources

from agents.evaluation.items import EvaluationSet, parse_evaluation_set

# name → file in this folder
BUILTIN_PACKS = {"arithmetic": "arithmetic.jsonl"}


def pack_bytes(name: str) -> bytes:
    """The pack's file as shipped; ``KeyError`` for a name that is not a pack."""
    return resources.files(__package__).joinpath(BUILTIN_PACKS[name]).read_bytes()


def load_pack(name: str) -> EvaluationSet:
    """The built-in pack ``name`` (one of ``BUILTIN_PACKS``), parsed."""
    return parse_evaluation_set(pack_bytes(name))
