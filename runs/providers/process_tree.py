"""Stopping a process together with everything it started, including children that left its
process group (the agent starts each engine in a session of its own, so a signal to the
agent's group never reaches vLLM).

Guarantees of ``kill_tree``:
- every process descended from ``pid`` when it is first called gets the signal too — found
  through ``/proc`` *before* anything is signalled, because once the agent dies its children
  are re-parented and can no longer be told apart;
- a descendant is signalled only while it is still the same process (its start time is
  compared), so a pid recycled in between is never hit;
- where ``/proc`` is missing only ``pid``'s group is signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

Process = tuple[int, str]  # (pid, start time in clock ticks since boot)


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) of ``pid``, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after it.
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), fields[19]


def descendants(pid: int) -> list[Process]:
    """Every process below ``pid``, children first."""
    children: dict[int, list[Process]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(ValueError, IndexError):
            stat = _stat(int(entry.name))
            if stat is not None:
                children.setdefault(stat[0], []).append((int(entry.name), stat[1]))
    found: list[Process] = []
    queue = list(children.get(pid, []))
    while queue:
        current = queue.pop(0)
        found.append(current)
        queue.extend(children.get(current[0], []))
    return found


def _signal(pid: int, sig: signal.Signals) -> None:
    """One signal to ``pid``: to its whole group when it leads one (an engine's session),
    else to it alone (its group is someone else's). Never twice: a handler that counts
    its signals (an agent asked to stop) must see one ask."""
    try:
        os.killpg(pid, sig)
        return
    except (ProcessLookupError, PermissionError):
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def kill_tree(
    pid: int,
    sig: signal.Signals,
    *,
    below: list[Process] | None = None,
    include_root: bool = True,
) -> list[Process]:
    """Sends ``sig`` to ``pid`` (and its group; unless ``include_root`` is False, for a
    ``pid`` already gone) and to each descendant still alive; returns the descendants found
    (pass them back as ``below`` for a later, harder signal)."""
    found = below if below is not None else descendants(pid)
    if include_root:
        _signal(pid, sig)
    for child, started in found:
        stat = _stat(child)
        if stat is not None and stat[1] == started:
            _signal(child, sig)
    return found
