"""The summary table printed at the end of ``benchsite-agent run``, read from the journal.

Guarantee: built only from the messages the agent sent (the journal), so what people read is
exactly what the site received.
"""

from __future__ import annotations

import json
from pathlib import Path

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from agents.protocol.slo_verdicts import VERDICT_WORDS, level_verdict


def read_journal(path: Path) -> list[dict]:
    """Every message in the journal, in sequence order (a torn last line is skipped)."""
    messages = []
    if not path.exists():
        return messages
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            messages.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return sorted(messages, key=lambda message: message.get("seq", 0))


def _ms(value: object) -> str:
    return "–" if value is None else f"{value:,.1f}"


def _config_text(config: dict) -> str:
    return " ".join(f"{key}={value}" for key, value in sorted(config.items())) or "(defaults)"


def _level_text(level: dict) -> str:
    if "concurrency" in level:
        return f"c={level['concurrency']}"
    return f"{level['request_rate']} req/s"


def summary_table(messages: list[dict], *, simulated: bool) -> Group:
    """One row per measured level, then one line per trial that failed or was skipped."""
    title = "Run summary" + (" — SIMULATED (not measured on hardware)" if simulated else "")
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("trial", overflow="fold")
    table.add_column("level")
    for column in ("ok/fail", "TTFT p50/p99 ms", "TPOT p50", "ITL p99", "out tok/s", "SLOs"):
        table.add_column(column, justify="right")
    configs = {m["trial"]: m["serve_config"] for m in messages if m["type"] == "trial_started"}
    problems = []
    for message in messages:
        trial = message.get("trial")
        label = f"{trial} {_config_text(configs.get(trial, {}))}"
        if message["type"] == "measurement":
            result = message["result"]
            slos = result.get("slo") or {}
            decided = level_verdict(slos)
            verdict = "–" if decided is None else VERDICT_WORDS[decided]
            partial = "*" if result.get("partial") else ""
            table.add_row(
                label,
                _level_text(message["level"]) + partial,
                f"{result['completed']}/{result['failed']}",
                f"{_ms(result.get('median_ttft_ms'))}/{_ms(result.get('p99_ttft_ms'))}",
                _ms(result.get("median_tpot_ms")),
                _ms(result.get("p99_itl_ms")),
                _ms(result.get("output_throughput")),
                verdict,
            )
            if partial:
                problems.append(
                    Text(
                        f"* trial {trial} {_level_text(message['level'])}: partial level, "
                        f"{result.get('aborted', 0)} requests cut off"
                    )
                )
        elif message["type"] == "trial_finished" and message["outcome"] != "succeeded":
            why = message.get("failure_class") or message["outcome"]
            first_line = (message.get("log_tail") or "").strip().splitlines()[:1]
            detail = f": {first_line[0][:200]}" if first_line else ""
            # Plain Text, never markup: log lines are full of [brackets].
            line = Text(f"trial {label}: {message['outcome']} ({why})", style="red")
            problems.append(line + Text(detail))
    return Group(table, *problems)
