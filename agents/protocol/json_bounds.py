"""Bounds on JSON documents before they are decoded: a nesting depth every Benchsite
document stays within, and a loader that refuses deeper ones without recursing."""

from __future__ import annotations

import json
import re

from pydantic_core import from_json

# The deepest nesting any Benchsite JSON document may have. Legitimate ones stay far below it:
# an experiment is about 4 deep (body → workload → dataset → list), an agent batch about 6
# (body → messages → message → result/server → metric → series). Python's JSON decoder and
# every recursive walk of a decoded value fail with RecursionError a few hundred levels down,
# so documents deeper than this are refused before they are decoded.
MAX_JSON_DEPTH = 64

# What a depth scan skips: whole strings (brackets inside them are text) and every run of
# characters that is neither a bracket nor a quote. What is left is the document's brackets.
# A string left open runs to the end of the text (the decoder stops there too): every quote
# then matches at once, which keeps the scan linear (no retrying from each later quote).
_JSON_NOT_A_BRACKET = r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)|[^\[\]{}"]+'
_JSON_NOT_A_BRACKET_TEXT = re.compile(_JSON_NOT_A_BRACKET, re.DOTALL)
_JSON_NOT_A_BRACKET_BYTES = re.compile(_JSON_NOT_A_BRACKET.encode(), re.DOTALL)
# How each bracket moves the depth, as str characters and as bytes (which iterate as ints).
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_BRACKET_STEP |= {ord(char): step for char, step in _BRACKET_STEP.items()}


def json_depth_exceeds(text: str | bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when the JSON text ``text`` nests arrays and objects deeper than ``limit``.

    Reads the raw text without decoding it and without recursion, so no depth, however
    large, can exhaust the stack here: call it before ``json.loads``. On text that is not
    JSON the decoder fails before it nests deeper than this scan counts."""
    if isinstance(text, bytes | bytearray | memoryview):
        text = bytes(text)
        if text.count(b"[") + text.count(b"{") <= limit:
            return False  # too few brackets to nest that deep, whatever their order
        brackets = _JSON_NOT_A_BRACKET_BYTES.sub(b"", text)
    else:
        if text.count("[") + text.count("{") <= limit:
            return False
        brackets = _JSON_NOT_A_BRACKET_TEXT.sub("", text)
    depth = 0
    for char in brackets:
        depth += _BRACKET_STEP[char]
        if depth > limit:
            return True
    return False


class JsonTooDeep(ValueError):
    """A JSON document nests deeper than ``MAX_JSON_DEPTH``; it was not decoded."""


def _nests_deeper(value: object, limit: int) -> bool:
    """Whether a decoded JSON value nests arrays and objects deeper than ``limit`` (counted as
    ``json_depth_exceeds`` counts brackets), without recursion."""
    stack = [(value, 1)] if isinstance(value, list | dict) else []
    while stack:
        container, depth = stack.pop()
        if depth > limit:
            return True
        for item in container.values() if isinstance(container, dict) else container:
            if isinstance(item, list | dict):
                stack.append((item, depth + 1))
    return False


def json_loads_bounded(text: str | bytes, **kwargs) -> object:
    """``json.loads`` that raises ``JsonTooDeep`` (a ``ValueError``) for a document deeper
    than ``MAX_JSON_DEPTH`` instead of decoding it (and failing with ``RecursionError``).

    A document in UTF-8 is first decoded by pydantic-core's parser (Rust: it reads what the
    standard library reads, big integers and ``NaN`` included, and stops at a fixed depth by
    itself, without recursing into Python), its depth then counted on the value: several
    times faster than the scan and ``json.loads``. Anything it refuses (a lone surrogate,
    UTF-16, nesting past its own limit, text that is not JSON) takes the path below, so what
    is accepted and every error are the standard library's."""
    if not kwargs:
        try:
            value = from_json(text)
        except ValueError:
            pass  # decided below, as the standard library decides it
        else:
            if _nests_deeper(value, MAX_JSON_DEPTH):
                raise JsonTooDeep(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
            return value
    if isinstance(text, bytes | bytearray):
        # As json.loads would read them (UTF-8, -16 or -32): a UTF-16 character may hold a
        # bracket's or a quote's byte, so the bytes are scanned as the text they decode to.
        text = bytes(text).decode(json.detect_encoding(text), "surrogatepass")
    if json_depth_exceeds(text):
        raise JsonTooDeep(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return json.loads(text, **kwargs)
