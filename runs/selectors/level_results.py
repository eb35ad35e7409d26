"""A stored measurement's result (``Measurement.result``) as the protocol's ``LevelResult``:
the one way the site's figures, reports and costs read what a load level measured.

Guarantees:

- Every result ever stored reads: one stored by a protocol 1 or 2 agent, before the result
  was typed, may hold keys ``LevelResult`` does not know or figures of another shape; those
  read as absent (None) instead of failing a page. ``completed``, ``failed`` and
  ``duration`` were required of every stored result, so they are always there.
- Pure: nothing is written back.
"""

from __future__ import annotations

from collections.abc import Mapping

import pydantic

from agents import protocol


def stored_level_result(result: Mapping[str, object]) -> protocol.LevelResult:
    """``result`` (a ``Measurement.result``) as a ``LevelResult``, reading what it can."""
    known = {
        key: value for key, value in result.items() if key in protocol.LevelResult.model_fields
    }
    while True:
        try:
            return protocol.LevelResult.model_validate(known)
        except pydantic.ValidationError as exc:
            refused = {error["loc"][0] for error in exc.errors() if error["loc"]}
            if not refused & known.keys():
                raise  # nothing left to drop: not a result any agent stored
            known = {key: value for key, value in known.items() if key not in refused}
