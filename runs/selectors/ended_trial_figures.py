"""The priced figures of trials whose run has ended, kept in this process's memory
(``ended_trial_figures``), so that a report does not price thousands of trials on every view.

Guarantee: an entry is served only for the very pricing it was computed at, and only for the
run it was computed for (``EndedTrialFigures`` says why that is never stale).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from runs.costs import TrialCost


@dataclass(frozen=True, slots=True)
class PricedTrial:
    """A trial's figures at one pricing: ``key`` is (level figure rules, (pod rate, its source,
    simulated by its experiment's engine)), the inputs of its cost besides its levels and cold
    start."""

    run_key: str
    key: tuple
    cost: TrialCost
    qualifying: tuple[str, ...]
    levels_simulated: bool


class EndedTrialFigures:
    """The priced figures of trials whose run has ended, kept in this process's memory.

    They spare a report the arithmetic of thousands of trials on every view (most of its
    time once the levels are no longer read). Sound because an ended run is frozen once its
    delivery grace is over: ingest refuses every message then (``runs.services.ingest``), so
    its trials' levels and cold start never change again; only such runs are kept here. What
    may still change — the price of a run not billed at its own rate (the catalogue, the
    organization's override, the experiment's GPU type, cloud or count), whether the
    experiment is simulated, and the rules of the level figures — is the entry's ``key``: an
    entry whose key is not today's is priced again, never served. An entry also names its
    run, whose random UUID keeps a re-created database's reused trial ids from meeting an
    old entry. Bounded, least recently used out first; safe to share between threads.
    """

    def __init__(self, max_trials: int):
        self.max_trials = max_trials
        self._entries: OrderedDict[int, PricedTrial] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, trial_id: int, run_key: str, key: tuple) -> PricedTrial | None:
        """The entry of this trial of that run if it holds for ``key``, else None."""
        with self._lock:
            entry = self._entries.get(trial_id)
            if entry is None or entry.run_key != run_key or entry.key != key:
                return None
            self._entries.move_to_end(trial_id)
            return entry

    def put_many(self, entries: dict[int, PricedTrial]) -> None:
        with self._lock:
            for trial_id, entry in entries.items():
                self._entries[trial_id] = entry
                self._entries.move_to_end(trial_id)
            while len(self._entries) > self.max_trials:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


# About 4 kB a trial (its cost, chosen level and notes): 10,000 trials — five organizations
# of 1,000 runs — hold at most 40 MB.
ended_trial_figures = EndedTrialFigures(max_trials=10_000)
