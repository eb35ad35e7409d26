"""Validation of an experiment as a whole: the serve grid and workload against the shared
schema in ``agents.protocol``, and against the model, GPU count and uploaded datasets.

Guarantee: ``experiment_spec_check`` either returns the normalised grid, workload, SLOs and
search (``runs.experiment_search``) exactly as they will be stored and sent to the agent, or
raises ``DomainValidationError`` listing every problem by field path
(``serve_grid.max_num_seqs[1]``, ``workload.dataset.input_len``, ``search.strategy`` …).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pydantic
from django.conf import settings

from agents.hardware import GIB, spec_decoding
from agents.protocol import (
    SERVE_FLAGS_SCHEMA_VERSION,
    ServeGridError,
    Slos,
    Workload,
    lora_adapters_problems,
    pydantic_field_errors,
    trial_configs,
    validate_serve_grid,
)
from runs.errors import DomainValidationError
from runs.experiment_evaluation import evaluation_check
from runs.experiment_search import search_check
from runs.experiment_workload import workload_fit_check
from runs.models import Endpoint, GpuType, ModelSpec, Organization
from runs.models.experiments import Engine
from runs.placement import MAX_FALLBACK_GPU_TYPES
from runs.selectors.prices import gpu_price

# Docker image tags: what `docker tag` accepts.
_IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_VERSION_IN_TAG = re.compile(r"^v?(\d+\.\d+(?:\.\d+)?)")
# Runpod network volume ids: letters, digits, '_' and '-' (they go into a GraphQL query).
_NETWORK_VOLUME_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
CONTAINER_DISK_GB = (10, 2000)
# Images besides the experiment's own that one run measures the same grid on.
MAX_COMPARE_IMAGE_TAGS = 3


@dataclass(frozen=True)
class CheckedSpec:
    serve_grid: dict
    serve_flags_schema_version: int
    workload: dict
    slos: dict
    fallback_gpu_types: list[str]
    compare_image_tags: list[str]
    search: dict
    evaluation: dict = field(default_factory=dict)


@dataclass(frozen=True)
class PlannedTrial:
    """One trial a run of an experiment measures: a serve configuration on one image."""

    image_tag: str | None  # None: the simulator, or a vLLM experiment with no tag set yet
    serve_config: dict


def experiment_image_tags(experiment) -> list[str | None]:
    """The images a run of ``experiment`` measures its grid on, one pod each, in order: its
    own tag, then the ones it compares with; ``[None]`` for the simulator and for an existing
    endpoint (no image)."""
    if experiment.engine != Engine.VLLM:
        return [None]
    return [experiment.engine_image_tag or None, *(experiment.compare_image_tags or [])]


def experiment_trial_plan(experiment) -> list[PlannedTrial]:
    """The trials a run of ``experiment`` measures, in trial order: for each image (tag-major,
    so one pod runs a contiguous block), its grid's configurations, then vLLM's defaults when
    it asks for that baseline (``agents.protocol.trial_configs``). The one count of an
    experiment's trials: the job, the estimate, the API and the pages."""
    configs = trial_configs(experiment.serve_grid, defaults_trial=experiment.defaults_trial)
    return [
        PlannedTrial(image_tag=tag, serve_config=config)
        for tag in experiment_image_tags(experiment)
        for config in configs
    ]


def planned_trial_count(
    serve_grid: object, *, defaults_trial: bool = False, compare_image_tags: object = ()
) -> int | None:
    """How many trials ``experiment_trial_plan`` makes of these fields — a form's before it
    is saved, or a saved experiment's — or None when ``serve_grid`` is not a grid of lists.
    The one count the builder, the experiment's pages, the estimate and the run share."""
    if not isinstance(serve_grid, dict) or not all(
        isinstance(values, list) for values in serve_grid.values()
    ):
        return None
    try:
        configs = trial_configs(serve_grid, defaults_trial=bool(defaults_trial))
    except (TypeError, ValueError):
        return None
    tags = compare_image_tags if isinstance(compare_image_tags, list | tuple) else ()
    return len(configs) * (1 + len(tags))


def vllm_version_of_tag(tag: str) -> str | None:
    """'v0.11.0' or '0.11.0-cu128' → '0.11.0'; 'latest' or 'nightly' → None (unknown)."""
    match = _VERSION_IN_TAG.match(tag or "")
    return match.group(1) if match else None


def vllm_version_key(tag: str) -> str:
    """The vLLM version an image tag stands for where figures are kept per version (the
    simulator's calibrations): the release it names, else the tag itself."""
    return vllm_version_of_tag(tag) or tag


def image_tag_problem(tag: str) -> str | None:
    """Why ``tag`` cannot name the vLLM image a run pulls, or None when it can."""
    if not tag:
        return "The vLLM engine needs an image tag, e.g. 'v0.11.0'."
    if not _IMAGE_TAG.match(tag):
        return "Not a valid image tag (letters, digits, '_', '.', '-')."
    return None


def experiment_spec_check(
    *,
    org: Organization,
    model: ModelSpec,
    gpu_type: GpuType,
    gpu_count: int,
    engine: str,
    engine_image_tag: str,
    serve_grid: object,
    workload: object,
    slos: object,
    fallback_gpu_types: object = (),
    container_disk_gb: object = 80,
    network_volume_id: object = "",
    compare_image_tags: object = (),
    search: object = None,
    endpoint: Endpoint | None = None,
    defaults_trial: bool = False,
    trust_remote_code: bool = False,
    lora_adapters: object = (),
    evaluation: object = None,
) -> CheckedSpec:
    """Checks the parts of an experiment that depend on each other (see module docstring)."""
    errors: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    if engine == Engine.ENDPOINT:
        _check_endpoint_experiment(
            org=org,
            endpoint=endpoint,
            engine_image_tag=engine_image_tag,
            serve_grid=serve_grid,
            defaults_trial=defaults_trial,
            search=search,
            fallback_gpu_types=fallback_gpu_types,
            network_volume_id=network_volume_id,
            add=add,
        )
        if errors:  # what it refuses is not the grid's or the search's to explain further
            raise DomainValidationError(errors)
    elif endpoint is not None:
        add("endpoint", "Only an experiment with engine 'endpoint' names an endpoint.")

    if engine == "vllm":
        problem = image_tag_problem(engine_image_tag)
        if problem:
            add("engine_image_tag", problem)
    elif trust_remote_code:
        add(
            "trust_remote_code",
            "Only real vLLM runs a model's own code; the simulator and an "
            "existing endpoint have none to trust.",
        )
    if engine != "vllm" and lora_adapters:
        add(
            "lora_adapters",
            "Only real vLLM serves LoRA adapters; the simulator and an existing "
            "endpoint serve none.",
        )
    for error in lora_adapters_problems(
        list(lora_adapters) if isinstance(lora_adapters, tuple) else lora_adapters,
        served_model_name=model.hf_repo,
    ):
        add(f"lora_adapters{error.field}", error.message)

    grid: dict = {}
    if not isinstance(serve_grid, dict):
        add("serve_grid", "Expected an object mapping vLLM flags to lists of values.")
    else:
        try:
            grid = validate_serve_grid(
                serve_grid,
                gpu_count=gpu_count,
                max_context=model.max_context,
                max_trials=settings.BENCHSITE_MAX_GRID_TRIALS,
                vllm_version=vllm_version_of_tag(engine_image_tag) if engine == "vllm" else None,
                num_experts=model.facts.num_experts,
            )
        except ServeGridError as exc:
            for error in exc.errors:
                add(f"serve_grid.{error.field}" if error.field else "serve_grid", error.message)
        if engine == Engine.SIM:
            # A configuration the simulator cannot model would start one that refuses it.
            for index, value in enumerate(grid.get("speculative_config", [])):
                try:
                    spec_decoding(value)
                except ValueError as exc:
                    field, _, message = str(exc).partition(": ")
                    key = field.removeprefix("speculative_config")
                    add(f"serve_grid.speculative_config[{index}]{key}", message)
    compared = _check_compare_image_tags(
        compare_image_tags,
        engine=engine,
        engine_image_tag=engine_image_tag,
        grid=grid,
        gpu_count=gpu_count,
        max_context=model.max_context,
        add=add,
    )

    checked_workload = None
    try:
        checked_workload = Workload.model_validate(workload)
    except pydantic.ValidationError as exc:
        for error in pydantic_field_errors(exc, prefix="workload"):
            add(error.field, error.message)
    if checked_workload is not None:
        workload_fit_check(checked_workload, grid, model, org, add)

    checked_slos = None
    try:
        checked_slos = Slos.model_validate(slos if slos is not None else {})
    except pydantic.ValidationError as exc:
        for error in pydantic_field_errors(exc, prefix="slos"):
            add(error.field, error.message)

    checked_search = search_check(
        search,
        slos=checked_slos,
        workload=checked_workload,
        simulator_knows_gpu=gpu_type.hardware is not None,
        gpu_has_price=any(
            gpu_price(org=org, gpu_type=gpu_type, cloud_type=cloud).usd_per_gpu_hour
            for cloud in ("secure", "community")
        ),
        add=add,
    )

    checked_evaluation = evaluation_check(evaluation, org=org, add=add)

    fallbacks = _check_placement(
        model=model,
        gpu_type=gpu_type,
        gpu_count=gpu_count,
        fallback_gpu_types=fallback_gpu_types,
        container_disk_gb=container_disk_gb,
        network_volume_id=network_volume_id,
        add=add,
    )

    if errors:
        raise DomainValidationError(errors)
    assert checked_workload is not None and checked_slos is not None
    return CheckedSpec(
        serve_grid=grid,
        serve_flags_schema_version=SERVE_FLAGS_SCHEMA_VERSION,
        workload=checked_workload.model_dump(mode="json"),
        slos=checked_slos.model_dump(mode="json", exclude_none=True),
        fallback_gpu_types=fallbacks,
        compare_image_tags=compared,
        search=checked_search,
        evaluation=checked_evaluation,
    )


def _check_endpoint_experiment(
    *,
    org,
    endpoint,
    engine_image_tag,
    serve_grid,
    defaults_trial,
    search,
    fallback_gpu_types,
    network_volume_id,
    add,
) -> None:
    """An existing endpoint is measured as it is: it names one endpoint of the organization,
    and nothing that would start, configure or place a server (one trial, vLLM's own words
    for what it serves are the endpoint's business)."""
    if endpoint is None:
        add(
            "endpoint",
            "An experiment with engine 'endpoint' names one of the organization's endpoints.",
        )
    elif endpoint.organization_id != org.id:
        add("endpoint", "No such endpoint in this organization.")
    why = "An existing endpoint's configuration is not ours to change: one trial measures it as "
    if serve_grid:
        add("serve_grid", why + "it is; leave the serve grid empty.")
    if defaults_trial:
        add("defaults_trial", why + "it is; there is no defaults trial.")
    if engine_image_tag:
        add("engine_image_tag", "An existing endpoint runs no image of ours; leave it empty.")
    if search:
        add("search", "One trial has nothing to search; leave it empty.")
    if fallback_gpu_types:
        add("fallback_gpu_types", "Nothing is rented for an existing endpoint.")
    if network_volume_id:
        add("network_volume_id", "Nothing is rented for an existing endpoint.")


def _check_compare_image_tags(
    tags, *, engine, engine_image_tag, grid, gpu_count, max_context, add
) -> list[str]:
    """Checks the images the grid is compared on; returns them as they will be stored. Each
    is a valid tag, distinct, not the experiment's own, and the grid must be valid on the
    vLLM it names (a flag it does not know is that tag's error); all tags' trials together
    stay within the grid's limit."""
    field = "compare_image_tags"
    if not isinstance(tags, list | tuple) or not all(isinstance(tag, str) for tag in tags):
        add(field, "Expected a list of image tags.")
        return []
    if not tags:
        return []
    if engine != "vllm":
        add(field, "Only a vLLM experiment runs images; the simulator has none to compare.")
        return []
    if len(tags) > MAX_COMPARE_IMAGE_TAGS:
        add(field, f"At most {MAX_COMPARE_IMAGE_TAGS} image tags besides the experiment's own.")
        return []
    for index, tag in enumerate(tags):
        where = f"{field}[{index}]"
        problem = image_tag_problem(tag)
        if problem:
            add(where, problem)
        elif tag == engine_image_tag:
            add(where, f"{tag!r} is the experiment's own image tag; list other ones.")
        elif tag in tags[:index]:
            add(where, f"{tag!r} is listed twice.")
        elif grid and (problem := _grid_problem(grid, tag, gpu_count, max_context)):
            add(where, problem)
    trials = len(trial_configs(grid)) * (1 + len(tags))
    if trials > settings.BENCHSITE_MAX_GRID_TRIALS:
        add(
            field,
            f"{1 + len(tags)} images × the grid make {trials} trials; at most "
            f"{settings.BENCHSITE_MAX_GRID_TRIALS} per run.",
        )
    return list(tags)


def _grid_problem(grid: dict, tag: str, gpu_count: int, max_context: int) -> str | None:
    """Why ``grid`` cannot run on the vLLM ``tag`` names (every problem, flag by flag), or
    None when it can."""
    try:
        validate_serve_grid(
            grid,
            gpu_count=gpu_count,
            max_context=max_context,
            vllm_version=vllm_version_of_tag(tag),
        )
    except ServeGridError as exc:
        problems = [
            f"{f'serve_grid.{error.field}' if error.field else 'the serve grid'}: {error.message}"
            for error in exc.errors
        ]
        return f"On {tag}: " + "; ".join(problems)
    return None


def grid_problem_on_image(experiment, tag: str) -> str | None:
    """Why ``experiment``'s grid cannot run on the vLLM ``tag`` names, or None when it can
    (a run started on another image than the experiment's own)."""
    return _grid_problem(
        experiment.serve_grid, tag, experiment.gpu_count, experiment.model.max_context
    )


def _check_placement(
    *, model, gpu_type, gpu_count, fallback_gpu_types, container_disk_gb, network_volume_id, add
) -> list[str]:
    """Checks where the pod may go; returns the fallback GPU type ids as they will be stored."""
    low, high = CONTAINER_DISK_GB
    if (
        not isinstance(container_disk_gb, int)
        or isinstance(container_disk_gb, bool)
        or not low <= container_disk_gb <= high
    ):
        add("container_disk_gb", f"A whole number of GB from {low} to {high}.")
    if network_volume_id and not (
        isinstance(network_volume_id, str) and _NETWORK_VOLUME_ID.match(network_volume_id)
    ):
        add("network_volume_id", "A Runpod network volume id: letters, digits, '_' and '-'.")

    if not isinstance(fallback_gpu_types, list | tuple) or not all(
        isinstance(item, str) for item in fallback_gpu_types
    ):
        add("fallback_gpu_types", "Expected a list of GPU type ids.")
        return []
    if len(fallback_gpu_types) > MAX_FALLBACK_GPU_TYPES:
        add("fallback_gpu_types", f"At most {MAX_FALLBACK_GPU_TYPES} fallback GPU types.")
        return []
    known = GpuType.objects.in_bulk(list(fallback_gpu_types))
    primary = getattr(gpu_type, "id", None)
    for index, gpu_id in enumerate(fallback_gpu_types):
        field = f"fallback_gpu_types[{index}]"
        if gpu_id == primary:
            add(field, "The experiment's own GPU type is always tried first; list others.")
        elif gpu_id in fallback_gpu_types[:index]:
            add(field, f"{gpu_id!r} is listed twice.")
        elif gpu_id not in known:
            add(field, f"No GPU type {gpu_id!r} in the catalogue.")
        elif (hardware := known[gpu_id].hardware) and (
            model.weight_bytes > hardware.memory_bytes * gpu_count
        ):
            # A fallback that cannot hold the weights would only rent a GPU to fail on it.
            add(
                field,
                f"The weights ({model.weight_bytes / GIB:.1f} GiB) do not fit "
                f"{gpu_count}× {gpu_id} ({hardware.memory_gib:.1f} GiB each).",
            )
    return list(fallback_gpu_types)
