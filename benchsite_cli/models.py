"""``benchsite models list | show``."""

from __future__ import annotations

from benchsite_cli import EXIT_OK
from benchsite_cli.client import ApiClient
from benchsite_cli.lookup import find_row
from benchsite_cli.output import print_list, print_yaml
from figures.model_size import parameter_count_text


def models_list(api: ApiClient, args) -> int:
    print_list(
        api,
        "models/",
        {
            "id": lambda m: m["id"],
            "name": lambda m: m["name"],
            "hf repo": lambda m: m.get("hf_repo", ""),
            "params": lambda m: parameter_count_text(m.get("parameter_count")),
        },
    )
    return EXIT_OK


def models_show(api: ApiClient, args) -> int:
    print_yaml(find_row(api, "models", args.model, "model"))
    return EXIT_OK
