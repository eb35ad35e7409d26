"""vLLM's API server as one serial queue: the CPU time a request and its tokens cost outside
the GPU, spent one item after another.

Guarantees:

- ``vllm serve`` runs one API-server process (``--api-server-count`` 1) beside the engine
  core. Its event loop does, one item at a time, a new request's HTTP handling, chat
  template and tokenization (``request_s`` + ``prompt_token_s`` per prompt token, plus
  ``chat_request_s`` for a ``/v1/chat/completions`` request) and, after
  each engine step, the step's outputs: detokenizing and writing one SSE chunk per token
  (``output_token_s`` each). ``FrontEndQueue`` serves these items first come first served on
  one server, so when requests or tokens come faster than it can serve them they queue, and
  request throughput cannot exceed what that one process does: the many-small-requests
  ceiling the engine alone would not show.
- A request reaches the engine core when its input work is done (``admit``) plus the
  engine's fixed hand-off latency (``Efficiency.request_overhead_s``, not serial); a step's
  tokens reach the client when its output work is done (``deliver``). The engine never
  waits for the front end: its steps go on while the front end catches up, as vLLM V1's
  engine core (another process) does.
- Pure arithmetic on simulated time; no clock, no randomness.

``DEFAULT_FRONT_END`` costs nothing for a completions request: the fitted costs (5.1 ms,
1.2 µs, 17 µs, ``benchmarks.sim_calibration.FITTED_CONSTANTS``) are recorded but not adopted
until the capacity search's intervals hold with them (docs/simulator.md, "The fitted
constants"). A chat request costs ``CHAT_REQUEST_S`` more, fitted on the calibration rows
that ran the chat endpoint (docs/simulator.md, "The chat endpoint's serial cost").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FrontEnd:
    """CPU seconds of the API-server process per item of work."""

    # HTTP parsing, request validation, sampling params, the hand-off to the engine core and
    # the final usage chunk: per request.
    request_s: float = 0.0
    # Tokenization (and chat template) of the prompt: per prompt token.
    prompt_token_s: float = 0.0
    # Incremental detokenization and one streamed SSE chunk: per output token.
    output_token_s: float = 0.0
    # What a chat request costs beyond a completions one (the chat template rendered, the
    # messages validated, chat-shaped chunks): per /v1/chat/completions request.
    chat_request_s: float = 0.0


# Fitted on the calibration rows sent to /v1/chat/completions (GPUStack's 128-in, 4-out
# runs of 1,000 requests at once top out at 20-44 requests/s): docs/simulator.md, "The chat
# endpoint's serial cost".
CHAT_REQUEST_S = 0.020
DEFAULT_FRONT_END = FrontEnd(chat_request_s=CHAT_REQUEST_S)


class FrontEndQueue:
    """One API-server process: a single server, first come first served."""

    def __init__(self, costs: FrontEnd = DEFAULT_FRONT_END):
        self.costs = costs
        self.busy_until = 0.0

    def _serve(self, at: float, seconds: float) -> float:
        self.busy_until = max(at, self.busy_until) + seconds
        return self.busy_until

    def admit(self, arrival: float, prompt_len: int, chat: bool = False) -> float:
        """When a request sent at ``arrival`` (to the chat endpoint if ``chat``) has been
        tokenized and handed on."""
        costs = self.costs
        seconds = costs.request_s + costs.prompt_token_s * prompt_len
        return self._serve(arrival, seconds + (costs.chat_request_s if chat else 0.0))

    def deliver(self, step_end: float, tokens: int) -> float:
        """When the ``tokens`` sampled in a step that ended at ``step_end`` reach clients."""
        return self._serve(step_end, self.costs.output_token_s * tokens)
