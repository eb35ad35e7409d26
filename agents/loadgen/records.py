"""What the load generator knows about one request, timed per vLLM's benchmark semantics.

Guarantees:

- ``start`` is ``time.perf_counter()`` read just before the request was handed to the pool
  (connection set-up, when one is needed, is part of TTFT, as in ``vllm bench serve``).
- ``ttft`` is the arrival of the first SSE message carrying a non-empty ``choices`` list (its
  text may be empty); ``itl`` holds every later gap between such messages; ``latency`` (E2EL)
  ends at the last of them, so the trailing usage-only message is excluded.
- ``output_tokens``/``prompt_tokens`` are the server's ``usage`` figures, ``None`` when the
  server sent none. A record is a success only with at least one content message and no error.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class RequestRecord:
    """One measured request. Times are seconds (``perf_counter`` clock)."""

    index: int
    requested_output_len: int
    expected_prompt_len: int | None = None
    # Open-loop levels: when the schedule said to send, in seconds from the level's start.
    scheduled: float | None = None
    # A digest of the prompt text: every trial of a run sends the same traffic.
    prompt_sha: str | None = None
    # A chat session's request: which session (in the level) and which turn (1 the first).
    session: int | None = None
    turn: int | None = None
    # The ``model`` field it was sent with (the served model or a LoRA adapter's name).
    model: str | None = None
    start: float = 0.0
    finished: float = 0.0
    ttft: float | None = None
    latency: float | None = None
    itl: list[float] = field(default_factory=list)
    chunks: int = 0
    output_tokens: int | None = None
    prompt_tokens: int | None = None
    response_id: str | None = None
    success: bool = False
    error_kind: str | None = None
    error: str | None = None

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first, from the server's completion_tokens."""
        if not self.success or self.output_tokens is None or self.output_tokens < 2:
            return None
        return (self.latency - self.ttft) / (self.output_tokens - 1)

    @property
    def input_tokens(self) -> int:
        """The server's prompt token count, or our estimate when it sent none."""
        if self.prompt_tokens is not None:
            return self.prompt_tokens
        return self.expected_prompt_len or 0

    @property
    def served_output_tokens(self) -> int:
        """The server's completion token count, or the content messages when it sent none."""
        return self.output_tokens if self.output_tokens is not None else self.chunks

    def fail(self, kind: str, message: str) -> None:
        self.success = False
        self.error_kind = kind
        self.error = message

    def as_json(self) -> dict:
        """One line of ``--per-request`` output (milliseconds, like the level results)."""
        return {
            "index": self.index,
            "id": self.response_id,
            "success": self.success,
            "error_kind": self.error_kind,
            "error": self.error,
            "scheduled_s": self.scheduled,
            "prompt_sha": self.prompt_sha,
            "session": self.session,
            "turn": self.turn,
            "start_s": self.start,
            "ttft_ms": None if self.ttft is None else self.ttft * 1000,
            "tpot_ms": None if self.tpot is None else self.tpot * 1000,
            "e2el_ms": None if self.latency is None else self.latency * 1000,
            "itl_ms": [gap * 1000 for gap in self.itl],
            "chunks": self.chunks,
            "prompt_tokens": self.prompt_tokens,
            "expected_prompt_len": self.expected_prompt_len,
            "output_tokens": self.output_tokens,
            "requested_output_len": self.requested_output_len,
        }
