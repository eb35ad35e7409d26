"""The model and experiment forms of the web UI, translated to and from the API's payloads.

Guarantees:
- a submitted form becomes exactly the payload the REST API takes, and is checked by the
  API's own serializer and then the same service (``experiment_create`` …), so a page shows
  the API's errors, named by the API's field paths (``serve_grid.max_num_seqs[1]``);
- nothing is interpreted twice: a value the form cannot parse is passed on as typed, and
  the validator that the API uses says what is wrong with it;
- every error path lands in one *slot* of the form (``input_len``, ``serve_grid`` …), or in
  the general slot ``form`` when no field matches, so no error is ever dropped.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from agents.protocol import (
    SERVE_FLAGS,
    PrefixDataset,
    RandomDataset,
    ShareGptDataset,
    Slos,
    Workload,
    json_loads_bounded,
)
from runs.actors import Actor
from runs.errors import DomainValidationError
from runs.inputs.catalogue import ModelSpecSerializer
from runs.inputs.errors import flatten_errors
from runs.inputs.experiments import ExperimentSerializer
from runs.inputs.strict_fields import StrictIntegerField
from runs.models import Experiment, Membership, ModelSpec
from runs.placement import MAX_FALLBACK_GPU_TYPES
from runs.selectors.estimates import CostEstimate, experiment_estimate
from runs.services.catalogue import MODEL_SPEC_FIELDS, model_spec_create, model_spec_update
from runs.services.experiments import (
    EXPERIMENT_FIELDS,
    experiment_create,
    experiment_draft_check,
    experiment_update,
)

GENERAL_SLOT = "form"
FALLBACK_SELECTS = MAX_FALLBACK_GPU_TYPES  # one select per fallback an experiment may list
BLANK_GRID_ROWS = 2  # empty rows offered below the grid's flags when JavaScript is off

# The form's field lists come from the API's own models, so a field added there gets a slot
# here (and its errors a place on the page) without a second list to keep in step.
DATASET_FIELDS_BY_KIND = {
    model.model_fields["kind"].default: tuple(name for name in model.model_fields if name != "kind")
    for model in (RandomDataset, ShareGptDataset, PrefixDataset)
}
_DATASET_FIELDS = tuple(
    dict.fromkeys(n for names in DATASET_FIELDS_BY_KIND.values() for n in names)
)
_WORKLOAD_FIELDS = tuple(name for name in Workload.model_fields if name != "dataset")
SLO_NAMES = tuple(Slos.model_fields)
# Nested fields (the grid, fallbacks, workload, SLOs) have slots of their own (error_slot).
_NESTED = ("serve_grid", "fallback_gpu_types", "workload", "slos")
_TOP_LEVEL = (
    *(name for name in EXPERIMENT_FIELDS if name not in _NESTED),
    "budget",
    "reason",
    *MODEL_SPEC_FIELDS,
)


# ---------------------------------------------------------------------------------------------
# Errors: API field paths → the form's slots
# ---------------------------------------------------------------------------------------------


def error_slot(path: str) -> str:
    """The slot of the form where the error at ``path`` (the API's field path) is shown."""
    head, _, rest = path.partition(".")
    head = head.split("[", 1)[0]
    if head in ("serve_grid", "fallback_gpu_types", "slos") and not rest:
        return head
    if head == "serve_grid":
        return "serve_grid"
    if head == "slos":
        name = rest.split(".", 1)[0]
        return f"slo_{name}" if name in SLO_NAMES else "slos"
    if head == "workload":
        first, _, tail = rest.partition(".")
        first = first.split("[", 1)[0]
        if first == "dataset":
            name = tail.split(".", 1)[0]
            return name if name in _DATASET_FIELDS else "dataset_kind"
        return first if first in _WORKLOAD_FIELDS else "workload"
    if head in _TOP_LEVEL and not rest:
        return head
    return GENERAL_SLOT


def _shown(path: str, slot: str, message: str) -> str:
    # A message about a part of a field (a grid value, a list item) keeps its path so that
    # the reader sees which one; one about the whole field needs no prefix.
    whole = {slot, f"workload.{slot}", f"workload.dataset.{slot}", f"slos.{slot[4:]}"}
    return message if path in whole else f"{path}: {message}"


def invalid_grid_flags(fields: dict[str, list[str]]) -> set[str]:
    """The grid flags that errors name (``serve_grid.max_num_seqs[1]`` → ``max_num_seqs``)."""
    flags = set()
    for path in fields:
        if path.startswith("serve_grid."):
            flags.add(path.removeprefix("serve_grid.").split("[", 1)[0].split(".", 1)[0])
    return flags


def errors_by_slot(fields: dict[str, list[str]]) -> dict[str, list[str]]:
    """Every message of ``fields`` (path → messages), grouped by the slot that shows it."""
    slots: dict[str, list[str]] = {}
    for path, messages in fields.items():
        slot = error_slot(path)
        slots.setdefault(slot, []).extend(_shown(path, slot, message) for message in messages)
    return slots


# ---------------------------------------------------------------------------------------------
# Parsing typed text into JSON values
# ---------------------------------------------------------------------------------------------


def _literal(text: str) -> object:
    """A typed value as JSON would read it (``64``, ``0.9``, ``true``, ``null``), else the text
    itself: the validator then says what it expected."""
    lowered = text.lower()
    if lowered in ("true", "false", "null"):
        return json.loads(lowered)
    try:
        value = json_loads_bounded(text)
    except ValueError:
        return text
    if isinstance(value, float) and not math.isfinite(value):
        return text
    return value


def _items(text: str) -> list:
    """'1, 8, 64' → [1, 8, 64]; blanks between commas are ignored."""
    return [_literal(part.strip()) for part in text.split(",") if part.strip()]


def _put_number(target: dict, key: str, text: str | None) -> None:
    """Sets ``target[key]`` from typed text, leaving it out when blank (the default applies)."""
    text = (text or "").strip()
    if text:
        target[key] = _literal(text)


# ---------------------------------------------------------------------------------------------
# The experiment builder
# ---------------------------------------------------------------------------------------------


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
    "engine_image_tag",
    "grid_mode",
    "serve_grid_json",
    "dataset_kind",
    *_DATASET_FIELDS,
    *_WORKLOAD_FIELDS,
    *(f"slo_{name}" for name in SLO_NAMES),
    "budget_cap_usd",
)


def builder_form_from_post(data) -> BuilderForm:
    """The builder's inputs from a submitted form (a QueryDict)."""
    values = {name: data.get(name, "") for name in _BUILDER_TEXT_FIELDS}
    values["allow_other_cloud"] = "on" if data.get("allow_other_cloud") else ""
    rows = list(zip(data.getlist("grid_flag"), data.getlist("grid_values"), strict=False))
    rows = [(flag.strip(), text.strip()) for flag, text in rows if flag.strip() or text.strip()]
    fallbacks = [gpu for gpu in data.getlist("fallback_gpu_types") if gpu]
    return BuilderForm(values=values, grid_rows=rows, fallbacks=fallbacks)


def _text(value: object) -> str:
    """A stored value as an input shows it."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return json.dumps(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # 250.0 ms was typed as 250
    return str(value)


def _list_text(values: list) -> str:
    return ", ".join(_text(v) if v is not None else "null" for v in values)


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
        "container_disk_gb": str(experiment.container_disk_gb),
        "network_volume_id": experiment.network_volume_id,
        "engine": experiment.engine,
        "engine_image_tag": experiment.engine_image_tag,
        "grid_mode": "rows",
        "serve_grid_json": json.dumps(experiment.serve_grid, indent=2),
        "dataset_kind": dataset.get("kind", "random"),
        "endpoint": workload.get("endpoint", "completions"),
        "concurrency": _list_text(workload.get("concurrency", [])),
        "request_rates": _list_text(workload.get("request_rates", [])),
        "burstiness": _text(workload.get("burstiness", "")),
        "requests_per_level": _text(workload.get("requests_per_level", "")),
        "warmup_requests": _text(workload.get("warmup_requests", "")),
        "budget_cap_usd": str(experiment.budget_cap_usd),
    }
    for name_ in _DATASET_FIELDS:
        values[name_] = _text(dataset.get(name_))
    for slo in SLO_NAMES:
        values[f"slo_{slo}"] = _text(experiment.slos.get(slo))
    rows = [(flag, _list_text(values_)) for flag, values_ in experiment.serve_grid.items()]
    return BuilderForm(values=values, grid_rows=rows, fallbacks=list(experiment.fallback_gpu_types))


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
            grid[flag] = _items(text)
    return grid, errors


def _workload_from_form(values: dict[str, str]) -> dict:
    kind = values.get("dataset_kind", "")
    dataset: dict = {"kind": kind}
    for name in DATASET_FIELDS_BY_KIND.get(kind, ()):
        if name == "dataset_id":  # an uploaded dataset's id, picked from a list
            if values.get(name):
                dataset[name] = values[name]
        else:
            _put_number(dataset, name, values.get(name))
    workload: dict = {"dataset": dataset}
    if values.get("endpoint"):
        workload["endpoint"] = values["endpoint"]
    for name in ("concurrency", "request_rates"):
        workload[name] = _items(values.get(name, ""))
    for name in ("burstiness", "requests_per_level", "warmup_requests"):
        _put_number(workload, name, values.get(name))
    return workload


def experiment_payload(form: BuilderForm) -> tuple[dict, dict[str, list[str]]]:
    """The API payload the form describes, and errors only the form can have (bad JSON …)."""
    values = form.values
    grid, errors = _grid_from_form(form)
    slos: dict = {}
    for slo in SLO_NAMES:
        _put_number(slos, slo, values.get(f"slo_{slo}"))
    payload = {
        "name": values.get("name", ""),
        "description": values.get("description", ""),
        "model": values.get("model", ""),
        "gpu_type": values.get("gpu_type", ""),
        "gpu_count": _literal(values.get("gpu_count", "").strip()),
        "cloud_type": values.get("cloud_type", ""),
        "fallback_gpu_types": list(form.fallbacks),
        "allow_other_cloud": bool(values.get("allow_other_cloud")),
        "container_disk_gb": _literal(values.get("container_disk_gb", "").strip()),
        "network_volume_id": values.get("network_volume_id", ""),
        "engine": values.get("engine", ""),
        "engine_image_tag": values.get("engine_image_tag", ""),
        "serve_grid": grid if grid is not None else {},
        "workload": _workload_from_form(values),
        "slos": slos,
        "budget_cap_usd": values.get("budget_cap_usd", ""),
    }
    return payload, errors


def grid_trials(grid: object) -> int | None:
    """How many trials a grid makes (every combination of its values), if it is a grid."""
    if not isinstance(grid, dict) or not all(isinstance(v, list) for v in grid.values()):
        return None
    return math.prod(len(values) for values in grid.values())


@dataclass
class BuilderOutcome:
    """What checking (or saving) the builder's form gave: the API's errors by field path,
    the trial count when the grid is readable, and the estimate when everything was valid."""

    fields: dict[str, list[str]] = field(default_factory=dict)
    trials: int | None = None
    estimate: CostEstimate | None = None
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
) -> BuilderOutcome:
    """Checks the form exactly as the API's create (or update, for ``experiment``) would;
    stores the result only when ``save`` and everything is valid. A check writes, records
    and locks nothing (``experiment_draft_check``, as the API's ``experiments/validate``)."""
    payload, form_errors = experiment_payload(form)
    outcome = BuilderOutcome(trials=grid_trials(payload["serve_grid"]))
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
    outcome.trials = grid_trials(checked.serve_grid)
    if save:
        outcome.experiment = checked
    else:
        outcome.estimate = experiment_estimate(experiment=checked)
    return outcome


def estimate_json(estimate: CostEstimate | None) -> dict | None:
    """An estimate for the builder's live panel (numbers as JSON, texts ready to show)."""
    if estimate is None:
        return None
    return {
        "trials": estimate.trials,
        "levels_per_trial": estimate.levels_per_trial,
        "cost_usd": None if estimate.cost_usd is None else str(estimate.cost_usd),
        "cost_text": cost_text(estimate),
        "total_seconds": estimate.total_seconds,
        "duration_text": duration_text(estimate.total_seconds),
        "budget_cap_usd": str(estimate.budget_cap_usd),
        "within_budget": estimate.within_budget,
        "price_source": estimate.price_source,
        "warnings": estimate.warnings,
    }


def cost_text(estimate: CostEstimate) -> str:
    if estimate.cost_usd is None:
        return "unknown (no price)"
    return f"${estimate.cost_usd:,}"


def duration_text(seconds: float) -> str:
    """1234.5 → '20 min'; 5000 → '1 h 23 min'."""
    minutes = max(1, round(seconds / 60))
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


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


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------


def model_form_from_post(data) -> dict[str, str]:
    return {name: data.get(name, "") for name in MODEL_SPEC_FIELDS}


def model_form_from_fields(fields: dict) -> dict[str, str]:
    return {name: _text(fields.get(name, "")) for name in MODEL_SPEC_FIELDS}


def model_submit(
    *, values: dict[str, str], membership: Membership, actor: Actor, model: ModelSpec | None
) -> tuple[ModelSpec | None, dict[str, list[str]]]:
    """Registers (or changes) a model through the API's serializer and the catalogue service;
    returns the model, or the errors by field path with nothing stored."""
    # The API takes numbers as JSON numbers: typed text becomes one where it reads as one.
    numbers = {
        name
        for name, field_ in ModelSpecSerializer().fields.items()
        if isinstance(field_, StrictIntegerField)
    }
    payload = {
        name: _literal(value.strip()) if name in numbers else value
        for name, value in values.items()
        if value != ""
    }
    payload.setdefault("revision", "main")
    for optional in ("licence", "notes"):
        payload.setdefault(optional, "")
    serializer = ModelSpecSerializer(model, data=payload)
    if not serializer.is_valid():
        return None, flatten_errors(serializer.errors)
    try:
        if model is None:
            saved = model_spec_create(
                org=membership.organization, actor=actor, **serializer.validated_data
            )
        else:
            saved = model_spec_update(model=model, actor=actor, **serializer.validated_data)
    except DomainValidationError as exc:
        return None, exc.fields
    return saved, {}
