"""Agentic coding sessions: requests that depend on one another, read from a session JSONL
file (``parse_agentic``) or synthesized (``synthesize_sessions``), in one shape
(``AgenticTrace``) that the load generator and the simulator replay with their dependencies.

The JSONL format (one request a line; see docs/workloads.md):

    {"session": "s1", "id": "a", "parent": null, "delay_ms": 0, "input_length": 9000,
     "output_length": 300, "hash_ids": [0, 1, 2, 7, 8], "type": "main"}
    {"session": "s1", "id": "b", "parent": "a", "delay_ms": 1500, ...}

- ``id``: unique in the file (a string or a whole number); ``session``: which session.
- ``parent``: null (a root), an earlier line's ``id`` in the same session, or a list of them
  (a turn that waits for several sub-agents); a request starts ``delay_ms`` after the last
  of its parents finished (think or tool time); a root ``delay_ms`` after the trace's start.
- ``input_length``, ``output_length``: tokens; ``hash_ids`` (optional): one id per block of
  ``block_size`` input tokens, equal ids identical blocks (as Mooncake's); ``type``
  (optional): a label such as ``main`` or ``subagent``.

Guarantees: ``parse_agentic`` returns every request grouped by session in file order, or
raises ``TraceError`` naming the line and field (never another exception, whatever bytes it
is given); a parent always comes before its children. ``synthesize_sessions`` is
deterministic for a given generator.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from agents.protocol import MAX_INPUT_LEN
from agents.workloads.traces import (
    TraceError,
    _json_lines,
    _lengths_and_blocks,
    _reading,
    _seconds,
    _shown,
    _text,
)

MAX_LABEL = 40


@dataclass(frozen=True, slots=True)
class AgenticRequest:
    """One request of a session: the requests it waits for (indexes into its session's
    requests, all earlier), the seconds after the last of them finished (a root: after the
    session's start), its lengths, its block hash ids and its label."""

    parents: tuple[int, ...]
    delay: float
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] = ()
    kind: str = "main"


@dataclass(frozen=True, slots=True)
class AgenticSession:
    """A session: when it starts (seconds from the trace's start) and its requests, each
    after its parents."""

    start: float
    requests: tuple[AgenticRequest, ...]


@dataclass(frozen=True)
class AgenticTrace:
    """Sessions in start order, and the tokens each hash id stands for."""

    sessions: tuple[AgenticSession, ...]
    block_size: int

    @property
    def requests(self) -> int:
        return sum(len(session.requests) for session in self.sessions)

    @property
    def mean_rate(self) -> float:
        """Sessions started per second (``math.inf`` when all start at once)."""
        span = self.sessions[-1].start - self.sessions[0].start if self.sessions else 0.0
        return (len(self.sessions) - 1) / span if span > 0 else math.inf


def _key(value: object, line: int, field: str) -> str | int:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TraceError(
            f"must be a string or a whole number, got {_shown(value)}", line=line, field=field
        )
    return value


def parse_agentic(data: bytes, *, block_size: int = 512) -> AgenticTrace:
    """The sessions of a session JSONL file (module docstring)."""
    where: dict[str | int, tuple[str | int, int]] = {}  # id -> (session, index in session)
    sessions: dict[str | int, list] = {}  # session -> [(root offset, request)]
    required = ("session", "id", "input_length", "output_length")
    for number, item in _json_lines(_text(data), required):
        with _reading(number):
            session = _key(item["session"], number, "session")
            request_id = _key(item["id"], number, "id")
            if request_id in where:
                raise TraceError(
                    f"{_shown(request_id)} is used by an earlier line", line=number, field="id"
                )
            raw_parents = item.get("parent")
            named = raw_parents if isinstance(raw_parents, list) else [raw_parents]
            parents = []
            for parent in (p for p in named if p is not None):
                parent = _key(parent, number, "parent")
                if parent not in where:
                    raise TraceError(
                        f"{_shown(parent)} is not the id of an earlier line",
                        line=number,
                        field="parent",
                    )
                if where[parent][0] != session:
                    raise TraceError(
                        f"{_shown(parent)} belongs to another session", line=number, field="parent"
                    )
                parents.append(where[parent][1])
            delay = _seconds(item.get("delay_ms", 0), number, "delay_ms", scale=0.001)
            input_len, output_len, hash_ids = _lengths_and_blocks(item, number, block_size)
            kind = item.get("type", "main")
            if not isinstance(kind, str) or not 0 < len(kind) <= MAX_LABEL:
                raise TraceError(
                    f"must be a label of 1 to {MAX_LABEL} characters, got {_shown(kind)}",
                    line=number,
                    field="type",
                )
            requests = sessions.setdefault(session, [])
            where[request_id] = (session, len(requests))
            request = AgenticRequest(tuple(parents), delay, input_len, output_len, hash_ids, kind)
            requests.append((None if parents else delay, request))
    if not sessions:
        raise TraceError("no request")
    built = []
    for requests in sessions.values():
        roots = [offset for offset, _ in requests if offset is not None]
        start = min(roots)
        built.append(
            AgenticSession(
                start,
                tuple(
                    r
                    if offset is None
                    else AgenticRequest(
                        r.parents, offset - start, r.input_len, r.output_len, r.hash_ids, r.kind
                    )
                    for offset, r in requests
                ),
            )
        )
    built.sort(key=lambda session: session.start)
    origin = built[0].start
    return AgenticTrace(
        tuple(AgenticSession(s.start - origin, s.requests) for s in built), block_size
    )


@dataclass(frozen=True)
class SessionShape:
    """What a synthesized coding session looks like (``agents.protocol.AgenticDataset``)."""

    min_turns: int
    max_turns: int
    system_len: int
    task_len: int
    output_len: int
    tool_output_len: int
    tool_seconds: float
    subagent_probability: float
    subagents: int
    subagent_turns: int
    block_size: int


def synthesize_sessions(shape: SessionShape, count: int, rng: random.Random) -> AgenticTrace:
    """``count`` coding sessions, all starting at 0 (a level sends them as it paces them).

    Every agent's context is the shared system prompt and tool definitions
    (``system_len`` tokens, the same blocks for every session), then its own task. Each main
    turn sends the whole context and asks for ``output_len`` tokens (a tool call or an
    answer); the tool's result (``tool_output_len`` tokens) and the output join the context
    for the next turn, ``tool_seconds`` (exponential mean) later. With probability
    ``subagent_probability`` a turn also starts ``subagents`` sub-agents, each with a task of
    its own on the same system prompt, running ``subagent_turns`` turns in a chain; the main
    agent's next turn waits for all of them. Blocks are ``block_size`` tokens; a block that
    grows keeps its id (its text is a prefix of itself grown).
    """
    block = shape.block_size
    next_id = math.ceil(shape.system_len / block) + 1  # ids below are the system prompt's

    def stream_ids(tokens: int) -> list[int]:
        """Block ids of a fresh context: the system prompt's full blocks, then its own."""
        nonlocal next_id
        shared = shape.system_len // block
        own = math.ceil(tokens / block) - shared
        ids = list(range(shared)) + list(range(next_id, next_id + max(0, own)))
        next_id += max(0, own)
        return ids

    def grown(ids: list[int], tokens: int) -> list[int]:
        nonlocal next_id
        more = math.ceil(tokens / block) - len(ids)
        if more > 0:
            ids = ids + list(range(next_id, next_id + more))
            next_id += more
        return ids

    def pause() -> float:
        return rng.expovariate(1 / shape.tool_seconds) if shape.tool_seconds > 0 else 0.0

    sessions = []
    for _ in range(count):
        requests: list[AgenticRequest] = []
        context = shape.system_len + shape.task_len
        ids = stream_ids(context)
        waits: tuple[int, ...] = ()
        for turn in range(rng.randint(shape.min_turns, shape.max_turns)):
            if context + shape.output_len > MAX_INPUT_LEN:
                break
            requests.append(
                AgenticRequest(
                    waits, pause() if turn else 0.0, context, shape.output_len, tuple(ids), "main"
                )
            )
            main = len(requests) - 1
            waits = (main,)
            if shape.subagents and rng.random() < shape.subagent_probability:
                ends = []
                for _ in range(shape.subagents):
                    sub_context = shape.system_len + shape.task_len
                    sub_ids = stream_ids(sub_context)
                    parent = main
                    for _ in range(shape.subagent_turns):
                        requests.append(
                            AgenticRequest(
                                (parent,),
                                pause(),
                                sub_context,
                                shape.output_len,
                                tuple(sub_ids),
                                "subagent",
                            )
                        )
                        parent = len(requests) - 1
                        sub_context += shape.output_len + shape.tool_output_len
                        sub_ids = grown(sub_ids, sub_context)
                    ends.append(parent)
                waits = tuple(ends)
            context += shape.output_len + shape.tool_output_len
            ids = grown(ids, context)
        sessions.append(AgenticSession(0.0, tuple(requests)))
    return AgenticTrace(tuple(sessions), block)
