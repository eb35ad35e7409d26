"""The agent's spool: every message it sends, kept on disk until the site acknowledges it.

Guarantees:
- ``append`` gives the message the run's next sequence number and returns only once the
  message is on disk (written and fsync'd): a crash after that loses nothing.
  ``append_many`` does the same for several messages with one write and one fsync; a crash
  during it may keep a prefix of them, none of which had been returned (so none acknowledged).
- Sequence numbers never repeat within a run, across restarts of the agent included.
- ``pending`` lists every message not yet acknowledged, in sequence order; acknowledging a
  number twice, or one never sent, is harmless. ``ack_many`` records several acknowledgements
  with one write and one fsync.
- A line torn by a crash mid-write is ignored (it was never acknowledged, so never counted).
- ``compact`` rewrites the files without what was acknowledged, atomically (rename).
- ``epoch`` is the sequence space the site issued to the agent that started this spool
  (None until ``set_epoch``); it is kept with the spool, so an agent resuming on it sends
  in the same epoch and goes on numbering, and a new spool starts a new space at seq 0.

One agent owns a run's spool folder: two live ``Spool`` objects on one folder are not
supported (each would number and compact without seeing the other).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from uuid import UUID

MESSAGES = "messages.jsonl"
ACKED = "acked.txt"
NEXT_SEQ = "next_seq"
EPOCH = "epoch"


def _append_line(path: Path, line: str) -> None:
    append_lines_durably(path, [line])


def append_lines_durably(path: Path, lines: list[str]) -> None:
    """Appends ``lines`` to ``path`` and returns once they are on disk (one fsync)."""
    with path.open("a", encoding="utf-8") as file:
        file.write("".join(line + "\n" for line in lines))
        file.flush()
        os.fsync(file.fileno())


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_suffix(path.suffix + ".tmp")
    with temporary.open("w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


class Spool:
    """A run's unacknowledged messages in ``folder`` (see the module docstring)."""

    def __init__(self, folder: Path, run_id: UUID | str):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.run_id = str(run_id)
        self._messages: dict[int, dict] = {}
        self._acked: set[int] = set()
        self._next_seq = 0
        self._epoch: int | None = None
        self._load()

    def _load(self) -> None:
        messages_path = self.folder / MESSAGES
        if messages_path.exists():
            for line in messages_path.read_text(encoding="utf-8").splitlines():
                try:
                    message = json.loads(line)
                except json.JSONDecodeError:
                    continue  # torn by a crash mid-write: never acknowledged, so never sent
                self._messages[message["seq"]] = message
        acked_path = self.folder / ACKED
        if acked_path.exists():
            for line in acked_path.read_text(encoding="utf-8").split():
                if line.isdigit():
                    self._acked.add(int(line))
        next_path = self.folder / NEXT_SEQ
        floor = int(next_path.read_text()) if next_path.exists() else 0
        highest = max([*self._messages, *self._acked], default=-1)
        self._next_seq = max(floor, highest + 1)
        epoch_path = self.folder / EPOCH
        if epoch_path.exists():
            self._epoch = int(epoch_path.read_text())

    @property
    def next_seq(self) -> int:
        return self._next_seq

    @property
    def epoch(self) -> int | None:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Keeps ``epoch`` with the spool, durably, before the caller sends anything in it.
        Set once: a spool's messages are numbered in one epoch."""
        if self._epoch is not None and self._epoch != epoch:
            raise ValueError(f"this spool already sends in epoch {self._epoch}")
        _write_atomically(self.folder / EPOCH, str(epoch))
        self._epoch = epoch

    def append(self, message: dict) -> dict:
        """Numbers ``message`` (run id and seq added), writes it durably, returns it."""
        numbered = {**message, "run_id": self.run_id, "seq": self._next_seq}
        _append_line(self.folder / MESSAGES, json.dumps(numbered, separators=(",", ":")))
        self._messages[numbered["seq"]] = numbered
        self._next_seq += 1
        return numbered

    def append_many(self, messages: list[dict]) -> list[dict]:
        """Numbers ``messages`` consecutively, in order, writes them durably with one fsync,
        returns them numbered. Nothing is numbered if the write fails."""
        first = self._next_seq
        numbered = [
            {**message, "run_id": self.run_id, "seq": first + offset}
            for offset, message in enumerate(messages)
        ]
        if not numbered:
            return []
        append_lines_durably(
            self.folder / MESSAGES, [json.dumps(m, separators=(",", ":")) for m in numbered]
        )
        for message in numbered:
            self._messages[message["seq"]] = message
        self._next_seq = first + len(numbered)
        return numbered

    def ack(self, seq: int) -> None:
        """Marks ``seq`` as stored by the site; it will not be sent again."""
        if seq in self._acked or seq not in self._messages:
            return
        _append_line(self.folder / ACKED, str(seq))
        self._acked.add(seq)

    def ack_many(self, seqs: list[int]) -> None:
        """Marks every one of ``seqs`` as stored by the site, with one fsync; duplicates and
        numbers never sent are ignored, as with ``ack``."""
        fresh = sorted({s for s in seqs if s in self._messages and s not in self._acked})
        if not fresh:
            return
        append_lines_durably(self.folder / ACKED, [str(seq) for seq in fresh])
        self._acked.update(fresh)

    def pending(self) -> list[dict]:
        """Every message the site has not acknowledged, oldest first."""
        return [self._messages[seq] for seq in sorted(self._messages) if seq not in self._acked]

    def compact(self) -> None:
        """Forgets acknowledged messages on disk too, keeping the sequence counter."""
        _write_atomically(self.folder / NEXT_SEQ, str(self._next_seq))
        keep = self.pending()
        lines = "".join(json.dumps(m, separators=(",", ":")) + "\n" for m in keep)
        _write_atomically(self.folder / MESSAGES, lines)
        _write_atomically(self.folder / ACKED, "")
        self._messages = {m["seq"]: m for m in keep}
        self._acked = set()
