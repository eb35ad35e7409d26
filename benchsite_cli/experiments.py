"""``benchsite experiments list | show | create | validate``.

Guarantees: ``validate`` exits 1 (not 2) when the site finds the draft invalid, listing every
field's problems; an unreadable or non-mapping YAML file is one clear error line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from benchsite_cli import EXIT_OK, EXIT_REGRESSION
from benchsite_cli.client import ApiClient, CliError
from benchsite_cli.lookup import find_row
from benchsite_cli.output import err, out, print_list, print_yaml


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise CliError(f"{path} is not valid YAML: {exc}".replace("\n", " ")) from None
    if not isinstance(document, dict):
        raise CliError(f"{path}: expected a mapping of experiment fields at the top level")
    # YAML dates and the like become the strings the API reads.
    return json.loads(json.dumps(document, default=str))


def experiments_list(api: ApiClient, args) -> int:
    print_list(
        api,
        "experiments/",
        {
            "id": lambda e: e["id"],
            "name": lambda e: e["name"],
            "engine": lambda e: e.get("engine", ""),
            "trials": lambda e: e.get("trials", ""),
            "gpu": lambda e: e.get("gpu_type", ""),
        },
    )
    return EXIT_OK


def experiments_show(api: ApiClient, args) -> int:
    print_yaml(find_row(api, "experiments", args.experiment, "experiment"))
    return EXIT_OK


def experiments_create(api: ApiClient, args) -> int:
    body = read_yaml(args.file)
    experiment = api.post("experiments/", body)
    out(f"created experiment {experiment['id']} ({experiment['name']})")
    return EXIT_OK


def experiments_validate(api: ApiClient, args) -> int:
    body = read_yaml(args.file)
    try:
        estimate = api.post("experiments/validate/", body)
    except CliError as exc:
        if not exc.fields:
            raise
        err(f"{args.file}: invalid")
        for field, messages in exc.fields.items():
            for message in messages:
                err(f"{field}: {message}")
        return EXIT_REGRESSION  # the check's answer, not a failure to check
    out(
        f"{args.file}: valid — {estimate['trials']} trials × {estimate['levels_per_trial']} "
        f"levels, about {_duration(estimate['total_seconds'])}, "
        f"${estimate['cost_usd']} (cap ${estimate['budget_cap_usd']})"
    )
    for warning in estimate.get("warnings") or []:
        out(f"warning: {warning}")
    return EXIT_OK


def _duration(seconds: float) -> str:
    """22.4 → '22 s'; 1234.5 → '21 min' (a simulated run takes seconds, a real one minutes)."""
    return f"{max(1, round(seconds))} s" if seconds < 120 else f"{round(seconds / 60)} min"
