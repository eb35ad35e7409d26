"""What one benchmark is: ``BenchConfig``, checked when it is made.

Guarantees: a config always has at least one well-formed level, at least one prompt per level
and a positive burstiness and duration; ``describe`` never includes the API key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from agents.loadgen.activity import Activity
from agents.loadgen.agentic_prompts import AgenticPrompts
from agents.loadgen.openai import Endpoint
from agents.loadgen.prompts import PrefixPrompts, RandomPrompts, ShareGptPrompts, TracePrompts
from agents.loadgen.session_prompts import SessionPrompts
from agents.loadgen.tokenizer import Tokenizer
from agents.protocol import CapacitySearch, LevelResult, Slos

# What a level's requests are drawn from.
PromptSource = (
    RandomPrompts | PrefixPrompts | ShareGptPrompts | TracePrompts | SessionPrompts | AgenticPrompts
)


@dataclass(frozen=True)
class BenchConfig:
    """Everything one benchmark needs. ``levels`` are ``{"concurrency": n}`` or
    ``{"request_rate": r}`` dicts (``agents.protocol.workload_levels`` gives them); none
    when ``capacity`` searches for them.

    ``steady_multiple`` None runs each level as ``vllm bench serve`` does (``num_prompts``
    requests, figures over all of them); a number makes each level steady
    (``agents.loadgen.steady``): its window holds at least ``num_prompts`` and
    ``steady_multiple`` × the concurrency completions, and its headline figures come from
    the window."""

    base_url: str
    model: str
    source: PromptSource
    levels: tuple[dict, ...]
    endpoint: Endpoint = "completions"
    api_key: str | None = field(default=None, repr=False)
    burstiness: float = 1.0
    num_prompts: int = 200
    duration: float | None = None
    warmup: int = 0
    max_concurrency: int | None = None
    tokenizer: Tokenizer | None = None
    slos: Slos | None = None
    # "auto": <base-url>/metrics when it answers; None: no scraping.
    metrics_url: str | None = "auto"
    metrics_period: float = 1.0
    seed: int = 0
    request_timeout: float | None = 600.0
    connect_timeout: float = 10.0
    # The addresses the base URL's host was resolved to and checked (by the site): connect
    # to these only (``agents.loadgen.http.Origin``); empty: look the host up.
    connect_addresses: tuple[str, ...] = ()
    # vLLM's extension; hosted APIs that refuse unknown fields need it off.
    ignore_eos: bool = True
    steady_multiple: float | None = None
    ramp_up_seconds: float = 0.0
    capacity: CapacitySearch | None = None
    repeats: int = 1
    # How often a level too close to call at the SLOs' confidence is measured again.
    max_extensions: int = 0
    # Levels an earlier attempt on this configuration measured (their results, in order):
    # not measured again (``agents.loadgen.driver``).
    resume_results: tuple[LevelResult, ...] = ()
    # The served names of the LoRA adapters requests are spread over (``lora_spread``);
    # empty: every request asks for ``model``.
    lora_models: tuple[str, ...] = ()
    # Hears every request and response (a hang watchdog reads it); None: nobody listens.
    activity: Activity | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The CLI and the protocol validate user input; this catches a programming error
        # before it turns into an empty or endless level.
        if not self.levels and self.capacity is None:
            raise ValueError("at least one level (or a capacity search) is needed")
        for level in self.levels:
            if set(level) == {"concurrency"}:
                value = level["concurrency"]
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise ValueError(f"bad concurrency level {level!r}")
            elif set(level) == {"request_rate"}:
                rate = level["request_rate"]
                if rate != "inf" and not (isinstance(rate, int | float) and 0 < rate < math.inf):
                    raise ValueError(f"bad request-rate level {level!r}")
            else:
                raise ValueError(
                    f"a level is {{'concurrency': n}} or {{'request_rate': r}}: {level!r}"
                )
        if self.repeats < 1:
            raise ValueError("repeats must be at least 1")
        if self.num_prompts < 1 or self.warmup < 0 or not self.burstiness > 0:
            raise ValueError("num_prompts must be ≥ 1, warmup ≥ 0 and burstiness > 0")
        if self.duration is not None and not self.duration > 0:
            raise ValueError("duration must be above 0 seconds")
        if (self.steady_multiple is not None and self.steady_multiple < 0) or not (
            self.ramp_up_seconds >= 0
        ):
            raise ValueError("steady_multiple and ramp_up_seconds must not be negative")

    def describe(self) -> dict:
        """The configuration as JSON (the key is never included)."""
        source = self.source
        return {
            "base_url": self.base_url,
            "model": self.model,
            "lora_models": list(self.lora_models),
            "endpoint": self.endpoint,
            "dataset": {"kind": type(source).__name__}
            | {
                key: value if isinstance(value, int | float | str | None) else str(value)
                for key, value in vars(source).items()
            },
            "levels": list(self.levels),
            "burstiness": self.burstiness,
            "num_prompts": None if self.duration is not None else self.num_prompts,
            "duration": self.duration,
            "warmup": self.warmup,
            "max_concurrency": self.max_concurrency,
            "tokenizer": self.tokenizer is not None,
            "slos": self.slos.model_dump() if self.slos is not None else None,
            "metrics_url": self.metrics_url,
            "seed": self.seed,
            "request_timeout": self.request_timeout,
            "ignore_eos": self.ignore_eos,
            "steady_multiple": self.steady_multiple,
            "ramp_up_seconds": self.ramp_up_seconds,
            "capacity": self.capacity.model_dump() if self.capacity is not None else None,
            "repeats": self.repeats,
        }
