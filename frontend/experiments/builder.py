"""The experiment builder's form, translated to and from the API's experiment payload.

Guarantees: a submitted form becomes exactly the payload ``POST …/experiments/`` takes, and is
checked by the API's own serializer and then the same service (``experiment_create``,
``experiment_update``, or for a check ``experiment_draft_check``, which writes nothing), so the
page shows the API's errors by the API's field paths; a value the form cannot parse is passed
on as typed for the validator to name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from agents.protocol import SERVE_FLAGS, json_loads_bounded
from frontend.experiments.evaluation_form import (
    EVALUATION_INPUTS,
    evaluation_from_form,
    evaluation_values,
)
from frontend.experiments.form_slots import (
    CAPACITY_FIELDS,
    DATASET_FIELDS,
    DATASET_FIELDS_BY_KIND,
    DATASET_INPUTS,
    DATASET_TEXT_FIELDS,
    SEARCH_FIELDS,
    SLO_NAMES,
    WORKLOAD_FIELDS,
    dataset_input,
    errors_by_slot,
)
from frontend.experiments.form_text import items, list_text, literal, put_number, shown_text
from runs.actors import Actor
from runs.errors import DomainValidationError
from runs.experiment_spec import experiment_trial_plan, planned_trial_count
from runs.inputs.errors import flatten_errors
from runs.inputs.experiments import ExperimentSerializer
from runs.models import Experiment, Membership
from runs.models.experiments import Engine
from runs.placement import MAX_FALLBACK_GPU_TYPES
from runs.selectors.estimates import CostEstimate, experiment_estimate
from runs.selectors.predictions import GridPrediction, experiment_prediction
from runs.services.experiments import experiment_create, experiment_draft_check, experiment_update

# The capacity search's inputs: its fields as typed, and the two checkboxes (search at all;
# measure the bracket's ends again, on unless unticked, as the protocol's default).
CAPACITY_TEXT_FIELDS = tuple(
    f"capacity_{name}" for name in CAPACITY_FIELDS if name != "repeat_bracket"
)
CAPACITY_CHECKBOXES = ("capacity_search", "capacity_repeat_bracket")
FALLBACK_SELECTS = MAX_FALLBACK_GPU_TYPES  # one select per fallback an experiment may list
BLANK_GRID_ROWS = 2  # empty rows offered below the grid's flags when JavaScript is off


@dataclass
class BuilderForm:
    """What the builder's inputs hold, as typed (strings), plus the grid editor's rows."""

    values: dict[str, str] = field(default_factory=dict)
    grid_rows: list[tuple[str, str]] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)

    def padded(self) -> BuilderForm:
        """The same form with blank grid rows and fallback selects to fill in."""
        rows = list(self.grid_rows) + [("", "")] * BLANK_GRID_ROWS
        fallbacks = (list(self.fallbacks) + [""] * FALLBACK_SELECTS)[:FALLBACK_SELECTS]
        return BuilderForm(values=dict(self.values), grid_rows=rows, fallbacks=fallbacks)


_BUILDER_TEXT_FIELDS = (
    "name",
    "description",
    "model",
    "gpu_type",
    "gpu_count",
    "cloud_type",
    "container_disk_gb",
    "network_volume_id",
    "engine",
    "existing_endpoint",
    "engine_image_tag",
    "compare_image_tags",
    "lora_adapters",
    "grid_mode",
    "serve_grid_json",
    "dataset_kind",
    *DATASET_INPUTS,
    *WORKLOAD_FIELDS,
    *CAPACITY_TEXT_FIELDS,
    *(f"slo_{name}" for name in SLO_NAMES),
    *(f"search_{name}" for name in SEARCH_FIELDS),
    *EVALUATION_INPUTS,
    "budget_cap_usd",
)


def builder_form_from_post(data) -> BuilderForm:
    """The builder's inputs from a submitted form (a QueryDict)."""
    values = {name: data.get(name, "") for name in _BUILDER_TEXT_FIELDS}
    values["allow_other_cloud"] = "on" if data.get("allow_other_cloud") else ""
    values["defaults_trial"] = "on" if data.get("defaults_trial") else ""
    values["trust_remote_code"] = "on" if data.get("trust_remote_code") else ""
    for name in CAPACITY_CHECKBOXES:
        values[name] = "on" if data.get(name) else ""
    rows = list(zip(data.getlist("grid_flag"), data.getlist("grid_values"), strict=False))
    rows = [(flag.strip(), text.strip()) for flag, text in rows if flag.strip() or text.strip()]
    fallbacks = [gpu for gpu in data.getlist("fallback_gpu_types") if gpu]
    return BuilderForm(values=values, grid_rows=rows, fallbacks=fallbacks)


def builder_form_from_experiment(experiment: Experiment, *, name: str | None = None) -> BuilderForm:
    """The builder's inputs showing a stored experiment (under another ``name`` for a copy)."""
    workload = experiment.workload
    dataset = workload.get("dataset", {})
    values = {
        "name": experiment.name if name is None else name,
        "description": experiment.description,
        "model": str(experiment.model_id),
        "gpu_type": experiment.gpu_type_id,
        "gpu_count": str(experiment.gpu_count),
        "cloud_type": experiment.cloud_type,
        "allow_other_cloud": "on" if experiment.allow_other_cloud else "",
        "defaults_trial": "on" if experiment.defaults_trial else "",
        "trust_remote_code": "on" if experiment.trust_remote_code else "",
        "container_disk_gb": str(experiment.container_disk_gb),
        "network_volume_id": experiment.network_volume_id,
        "engine": experiment.engine,
        "existing_endpoint": str(experiment.endpoint_id or ""),
        "engine_image_tag": experiment.engine_image_tag,
        "compare_image_tags": ", ".join(experiment.compare_image_tags),
        "lora_adapters": "\n".join(
            f"{a['name']} {a['hf_repo']} {a['revision']}" for a in experiment.lora_adapters
        ),
        "grid_mode": "rows",
        "serve_grid_json": json.dumps(experiment.serve_grid, indent=2),
        "dataset_kind": dataset.get("kind", "random"),
        "endpoint": workload.get("endpoint", "completions"),
        "concurrency": list_text(workload.get("concurrency", [])),
        "request_rates": list_text(workload.get("request_rates", [])),
        "burstiness": shown_text(workload.get("burstiness", "")),
        "requests_per_level": shown_text(workload.get("requests_per_level", "")),
        "warmup_requests": shown_text(workload.get("warmup_requests", "")),
        "steady_multiple": shown_text(workload.get("steady_multiple")),
        "ramp_up_seconds": shown_text(workload.get("ramp_up_seconds")),
        "seed": shown_text(workload.get("seed")),
        "max_extensions": shown_text(workload.get("max_extensions")),
        "budget_cap_usd": str(experiment.budget_cap_usd),
    }
    values |= _capacity_values(workload.get("capacity"))
    values |= evaluation_values(experiment.evaluation)
    values |= {f"search_{name}": shown_text(experiment.search.get(name)) for name in SEARCH_FIELDS}
    for name_ in DATASET_FIELDS:
        values[dataset_input(name_)] = shown_text(dataset.get(name_))
    for slo in SLO_NAMES:
        values[f"slo_{slo}"] = shown_text(experiment.slos.get(slo))
    rows = [(flag, list_text(values_)) for flag, values_ in experiment.serve_grid.items()]
    return BuilderForm(values=values, grid_rows=rows, fallbacks=list(experiment.fallback_gpu_types))


def _capacity_values(capacity: dict | None) -> dict[str, str]:
    """The capacity search's inputs showing ``capacity`` (the workload's, None when off)."""
    values = {name: "" for name in CAPACITY_TEXT_FIELDS}
    values |= {"capacity_axis": "concurrency", "capacity_repeat_bracket": "on"}
    if capacity is None:
        return values | {"capacity_search": ""}
    for name in CAPACITY_FIELDS:
        if name in capacity and name != "repeat_bracket":
            values[f"capacity_{name}"] = shown_text(capacity[name])
    return values | {
        "capacity_search": "on",
        "capacity_repeat_bracket": "on" if capacity.get("repeat_bracket", True) else "",
    }


def _capacity_from_form(values: dict[str, str]) -> dict | None:
    """The workload's capacity search as the form gives it (None: no search)."""
    if not values.get("capacity_search"):
        return None
    capacity: dict = {"axis": values.get("capacity_axis") or "concurrency"}
    for name in CAPACITY_FIELDS:
        if name not in ("axis", "repeat_bracket"):
            put_number(capacity, name, values.get(f"capacity_{name}"))
    if not values.get("capacity_repeat_bracket"):
        capacity["repeat_bracket"] = False  # ticked is the default: left out, as stored
    return capacity


def blank_builder_form(*, model_id: str = "", gpu_type_id: str = "") -> BuilderForm:
    """A new experiment's starting point: one common question, easy to change."""
    values = {name: "" for name in _BUILDER_TEXT_FIELDS}
    values |= {
        "model": model_id,
        "gpu_type": gpu_type_id,
        "gpu_count": "1",
        "cloud_type": "secure",
        "container_disk_gb": "80",
        "engine": "vllm",
        "engine_image_tag": "v0.11.0",
        "grid_mode": "rows",
        "serve_grid_json": "{}",
        "dataset_kind": "random",
        "input_len": "1024",
        "output_len": "128",
        "endpoint": "completions",
        "concurrency": "1, 8, 64",
        "requests_per_level": "200",
        "budget_cap_usd": "50",
    }
    values |= _capacity_values(None)
    return BuilderForm(values=values, grid_rows=[("max_num_seqs", "64, 256")])


def _grid_from_form(form: BuilderForm) -> tuple[object, dict[str, list[str]]]:
    """The serve grid the form describes (rows, or raw JSON), and the form's own errors."""
    if form.values.get("grid_mode") == "json":
        text = form.values.get("serve_grid_json", "").strip() or "{}"
        try:
            return json_loads_bounded(text), {}  # bounded in depth, as the API's bodies
        except ValueError as exc:
            return None, {"serve_grid": [f"Not valid JSON: {exc}."]}
    grid: dict[str, list] = {}
    errors: dict[str, list[str]] = {}
    for flag, text in form.grid_rows:
        if not flag:
            errors.setdefault("serve_grid", []).append(f"Values {text!r} have no flag; pick one.")
        elif flag in grid:
            errors.setdefault(f"serve_grid.{flag}", []).append(
                "This flag is in two rows; put all its values in one."
            )
        else:
            grid[flag] = items(text)
    return grid, errors


def _workload_from_form(values: dict[str, str]) -> dict:
    kind = values.get("dataset_kind", "")
    dataset: dict = {"kind": kind}
    for name in DATASET_FIELDS_BY_KIND.get(kind, ()):
        typed = values.get(dataset_input(name), "")
        if name in DATASET_TEXT_FIELDS:  # an id picked from a list, a model's name …
            if typed.strip():
                dataset[name] = typed.strip()
        else:
            put_number(dataset, name, typed)
    workload: dict = {"dataset": dataset}
    if values.get("endpoint"):
        workload["endpoint"] = values["endpoint"]
    for name in ("concurrency", "request_rates"):
        workload[name] = items(values.get(name, ""))
    for name in (
        "burstiness",
        "requests_per_level",
        "warmup_requests",
        "steady_multiple",
        "ramp_up_seconds",
        "seed",
        "max_extensions",
    ):
        put_number(workload, name, values.get(name))
    capacity = _capacity_from_form(values)
    if capacity is not None:
        workload["capacity"] = capacity
    return workload


def _lora_adapters_from_form(text: str) -> list[dict]:
    """One adapter per line, "NAME HF_REPO REVISION"; a line of other words is sent as they
    are (the API names what is missing or wrong, on that adapter's field)."""
    adapters = []
    for line in text.splitlines():
        words = line.split()
        if words:
            adapters.append(dict(zip(("name", "hf_repo", "revision"), words, strict=False)))
    return adapters


def experiment_payload(form: BuilderForm) -> tuple[dict, dict[str, list[str]]]:
    """The API payload the form describes, and errors only the form can have (bad JSON …)."""
    values = form.values
    grid, errors = _grid_from_form(form)
    slos: dict = {}
    for slo in SLO_NAMES:
        put_number(slos, slo, values.get(f"slo_{slo}"))
    # Blank inputs leave the defaults (exhaustive, no limits): {} is stored for them.
    search: dict = {}
    if values.get("search_strategy"):
        search["strategy"] = values["search_strategy"]
    for name in SEARCH_FIELDS:
        if name != "strategy":
            put_number(search, name, values.get(f"search_{name}"))
    payload = {
        "name": values.get("name", ""),
        "description": values.get("description", ""),
        "model": values.get("model", ""),
        "gpu_type": values.get("gpu_type", ""),
        "gpu_count": literal(values.get("gpu_count", "").strip()),
        "cloud_type": values.get("cloud_type", ""),
        "fallback_gpu_types": list(form.fallbacks),
        "allow_other_cloud": bool(values.get("allow_other_cloud")),
        "container_disk_gb": literal(values.get("container_disk_gb", "").strip()),
        "network_volume_id": values.get("network_volume_id", ""),
        "engine": values.get("engine", ""),
        "engine_image_tag": values.get("engine_image_tag", ""),
        # "v0.12.0, v0.13.0": the same grid on each of these images too, one pod each.
        "compare_image_tags": [
            tag.strip() for tag in values.get("compare_image_tags", "").split(",") if tag.strip()
        ],
        "serve_grid": grid if grid is not None else {},
        "defaults_trial": bool(values.get("defaults_trial")),
        # Shown for real vLLM only: a box ticked before the engine changed is not sent.
        "trust_remote_code": bool(values.get("trust_remote_code"))
        and values.get("engine") == "vllm",
        "lora_adapters": _lora_adapters_from_form(values.get("lora_adapters", ""))
        if values.get("engine") == "vllm"
        else [],
        "workload": _workload_from_form(values),
        "slos": slos,
        "search": search,
        # Always sent whole: an edit stores what the form shows (frontend.experiments
        # .evaluation_form).
        "evaluation": evaluation_from_form(values),
        "budget_cap_usd": values.get("budget_cap_usd", ""),
    }
    if payload["engine"] == Engine.ENDPOINT:
        payload |= _ENDPOINT_LEAVES_OUT | {"endpoint": values.get("existing_endpoint") or None}
    return payload, errors


# What the builder hides for an existing endpoint (nothing rented, started or searched): not
# sent, so what the page does not show cannot refuse the experiment.
_ENDPOINT_LEAVES_OUT = {
    "fallback_gpu_types": [],
    "network_volume_id": "",
    "engine_image_tag": "",
    "compare_image_tags": [],
    "serve_grid": {},
    "defaults_trial": False,
    "search": {},
}


def form_trials(payload: dict) -> int | None:
    """How many trials the form's experiment makes (``planned_trial_count``), if its grid
    is readable: its grid, vLLM's defaults beside it and every image compared."""
    return planned_trial_count(
        payload.get("serve_grid"),
        defaults_trial=payload.get("defaults_trial", False),
        compare_image_tags=payload.get("compare_image_tags", ()),
    )


def experiment_trials(experiment: Experiment) -> int:
    """How many trials a run of ``experiment`` measures (``experiment_trial_plan``)."""
    return len(experiment_trial_plan(experiment))


@dataclass
class BuilderOutcome:
    """What checking (or saving) the builder's form gave: the API's errors by field path,
    the trial count when the grid is readable, and the estimate when everything was valid."""

    fields: dict[str, list[str]] = field(default_factory=dict)
    trials: int | None = None
    estimate: CostEstimate | None = None
    prediction: GridPrediction | None = None
    experiment: Experiment | None = None

    @property
    def ok(self) -> bool:
        return not self.fields

    @property
    def slots(self) -> dict[str, list[str]]:
        return errors_by_slot(self.fields)


def builder_submit(
    *,
    form: BuilderForm,
    membership: Membership,
    actor: Actor,
    experiment: Experiment | None = None,
    save: bool,
    predict: bool = False,
) -> BuilderOutcome:
    """Checks the form exactly as the API's create (or update, for ``experiment``) would;
    stores the result only when ``save`` and everything is valid. A check writes, records
    and locks nothing (``experiment_draft_check``, as the API's ``experiments/validate``);
    with ``predict`` it also runs every configuration on the simulator (as the API's
    ``experiments/predict``)."""
    payload, form_errors = experiment_payload(form)
    outcome = BuilderOutcome(trials=form_trials(payload))
    serializer = ExperimentSerializer(experiment, data=payload, context={"membership": membership})
    valid = serializer.is_valid()
    fields = dict(form_errors)
    if not valid:
        for path, messages in flatten_errors(serializer.errors).items():
            fields.setdefault(path, []).extend(messages)
    if fields:
        outcome.fields = fields
        return outcome
    data = serializer.validated_data
    try:
        if not save:
            checked = experiment_draft_check(
                org=membership.organization, actor=actor, experiment=experiment, **data
            )
        elif experiment is None:
            checked = experiment_create(org=membership.organization, actor=actor, **data)
        else:
            checked = experiment_update(experiment=experiment, actor=actor, **data)
    except DomainValidationError as exc:
        outcome.fields = exc.fields
        return outcome
    outcome.trials = experiment_trials(checked)
    if save:
        outcome.experiment = checked
    else:
        outcome.estimate = experiment_estimate(experiment=checked)
        if predict:
            outcome.prediction = experiment_prediction(experiment=checked)
    return outcome


def serve_flag_choices() -> list[dict]:
    """The flags the grid editor offers, with what each accepts (for labels and hints)."""
    flags = []
    for spec in SERVE_FLAGS.values():
        if spec.choices is not None:
            accepts = ", ".join(json.dumps(choice) for choice in spec.choices)
        elif spec.kind == "bool":
            accepts = "true, false"
        else:
            low = "" if spec.minimum is None else f"{'>' if spec.exclusive_minimum else '≥'}"
            bounds = []
            if spec.minimum is not None:
                bounds.append(f"{low} {spec.minimum}")
            if spec.maximum is not None:
                bounds.append(f"≤ {spec.maximum}")
            accepts = f"{spec.kind} {' and '.join(bounds)}".strip()
        flags.append({"name": spec.name, "help": spec.help, "accepts": accepts})
    return flags
