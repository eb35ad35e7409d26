"""Speculative decoding as the simulator models it: how many tokens a decode step verifies
and how many it keeps on average.

Guarantees:

- ``spec_decoding`` reads a checked ``speculative_config`` (``agents.protocol.speculative``;
  an object or its JSON text) into a ``SpecDecoding``, or raises ``ValueError`` naming the
  field: the simulator needs the share of proposed tokens accepted (``acceptance_rate``),
  given in the config or, for ``mtp`` only, ``MTP_ACCEPTANCE_RATE``: DeepSeek-V3's technical
  report (arXiv 2412.19437, section 5.4.3) measured 85-90 % acceptance of its
  multi-token-prediction module's second token; the low end is taken. No other method has
  a default: n-gram and draft models accept what the traffic and the draft allow, which a
  real run measures (``spec_decode_acceptance_rate``).
- Each decode step verifies ``tokens + 1`` per sequence (the step model costs it as a chunk
  of that many) and keeps ``expected_tokens`` = (1 - a^(k+1)) / (1 - a) on average: the
  accepted prefix of k proposals, each accepted with probability a independently, plus the
  target model's own token (Leviathan et al., "Fast Inference from Transformers via
  Speculative Decoding", 2023, eq. 1).
- ``draft_model`` is refused: the simulator does not know a draft model's size, so it
  cannot cost its passes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

MTP_ACCEPTANCE_RATE = 0.85
# Methods whose proposals cost a pass of a one-layer draft (EAGLE's head, the model's own
# MTP layer) per proposed token; n-gram proposals are a CPU look-up.
DRAFT_LAYER_METHODS = frozenset({"eagle", "eagle3", "mtp"})


@dataclass(frozen=True)
class SpecDecoding:
    """``tokens`` proposed per step by ``method``, each accepted with ``acceptance_rate``."""

    method: str
    tokens: int
    acceptance_rate: float

    @property
    def expected_tokens(self) -> float:
        """Tokens a decode step keeps on average, 1 to ``tokens + 1``."""
        a, k = self.acceptance_rate, self.tokens
        return float(k + 1) if a == 1 else (1 - a ** (k + 1)) / (1 - a)

    @property
    def draft_passes(self) -> int:
        """One-layer draft passes per step (0: the proposals cost no GPU time)."""
        return self.tokens if self.method in DRAFT_LAYER_METHODS else 0


def spec_decoding(value: object) -> SpecDecoding | None:
    """The simulator's reading of a checked ``speculative_config`` (None: none given);
    ``ValueError`` naming the field it cannot model."""
    if value is None:
        return None
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, Mapping):
        raise ValueError("speculative_config: expected an object")
    method = str(value.get("method"))
    if method == "draft_model":
        raise ValueError(
            "speculative_config.method: the simulator does not model a draft_model (it does "
            "not know the draft's size); use eagle, eagle3, mtp or ngram, or real vLLM"
        )
    rate = value.get("acceptance_rate")
    if rate is None and method == "mtp":
        rate = MTP_ACCEPTANCE_RATE
    if rate is None:
        raise ValueError(
            f"speculative_config.acceptance_rate: the simulator needs the share of proposed "
            f"tokens {method} gets accepted (0 to 1; no default for {method}: it depends on "
            "the draft and the traffic); a real run measures it as spec_decode_acceptance_rate"
        )
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
        raise ValueError(f"speculative_config.acceptance_rate: must be 0 to 1; got {rate!r}")
    tokens = value.get("num_speculative_tokens")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ValueError("speculative_config.num_speculative_tokens: must be a whole number ≥ 1")
    return SpecDecoding(method, tokens, float(rate))
