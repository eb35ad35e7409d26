"""The summary table printed at the end of ``benchsite-agent run``, read from the journal.

Guarantee: built only from the messages the agent sent (the journal), so what people read is
exactly what the site received.
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table


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


def summary_table(messages: list[dict], *, simulated: bool) -> Table:
    """One row per measured level, and one per trial that failed or was skipped."""
    title = "Run summary" + (" — SIMULATED (not measured on hardware)" if simulated else "")
    table = Table(title=title, title_justify="left")
    for column in ("trial", "config", "level", "ok/failed", "TTFT p50", "TTFT p99"):
        table.add_column(column, justify="left" if column in ("config", "level") else "right")
    for column in ("TPOT p50", "ITL p99", "out tok/s", "SLOs"):
        table.add_column(column, justify="right")
    table.add_column("note")
    configs = {m["trial"]: m["serve_config"] for m in messages if m["type"] == "trial_started"}
    for message in messages:
        if message["type"] == "measurement":
            result = message["result"]
            slos = result.get("slo") or {}
            verdict = (
                "–" if not slos else ("met" if all(s["met"] for s in slos.values()) else "missed")
            )
            note = f"partial: {result.get('aborted', 0)} cut off" if result.get("partial") else ""
            table.add_row(
                str(message["trial"]),
                _config_text(configs.get(message["trial"], {})),
                _level_text(message["level"]),
                f"{result['completed']}/{result['failed']}",
                _ms(result.get("median_ttft_ms")),
                _ms(result.get("p99_ttft_ms")),
                _ms(result.get("median_tpot_ms")),
                _ms(result.get("p99_itl_ms")),
                _ms(result.get("output_throughput")),
                verdict,
                note,
            )
        elif message["type"] == "trial_finished" and message["outcome"] != "succeeded":
            why = message.get("failure_class") or message["outcome"]
            first_line = (message.get("log_tail") or "").strip().splitlines()[:1]
            table.add_row(
                str(message["trial"]),
                _config_text(configs.get(message["trial"], {})),
                f"[red]{message['outcome']}: {why}[/]",
                *([""] * 7),
                first_line[0][:80] if first_line else "",
            )
    return table
