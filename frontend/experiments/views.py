"""Pages for models and experiments: register and edit models (with what fits which GPUs),
delete models no experiment uses; build, check, duplicate and start
experiments.

Like the API, these pages reach tenant rows only through ``runs.access`` (another
organization's row is a 404, a viewer's write a 403) and write only through the services the
API calls, via ``frontend.experiments.builder`` and ``model_form``: a page and the API give
the same errors.
"""

from __future__ import annotations

import json

from django.contrib import messages
from django.db.models import Count, Max
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from agents.hardware import MODEL_PRESETS
from agents.protocol import SLO_PERCENTILES, TRACE_FORMATS, Slos
from agents.workloads import BURSTGPT_LOG_TYPES
from frontend.experiments import (
    builder,
    estimate_panel,
    fit,
    form_slots,
    model_form,
    prediction_panel,
)
from frontend.experiments.schedule_form import schedule_form_values
from frontend.experiments.views_evaluation_sets import items_text
from frontend.org_pages import org_context, org_page
from runs.access import Need, access_experiment, access_model_spec, scoped
from runs.actors import actor_from_request
from runs.answer_text import run_answer_state
from runs.errors import Conflict, DomainValidationError
from runs.experiment_evaluation import MAX_EVALUATION_CONCURRENCY, builtin_packs
from runs.models import Endpoint, EvaluationSet, Experiment, GpuType, ModelSpec, WorkloadDataset
from runs.models.catalogue import WeightDtype
from runs.models.experiments import DATASET_FORMAT_CHOICES, CloudType, Engine
from runs.models.runs import RunState, RunTrigger
from runs.selectors.estimates import experiment_estimate
from runs.selectors.run_history import with_simulated
from runs.selectors.schedules import experiment_schedule, schedule_state
from runs.selectors.software_stacks import run_stacks
from runs.services.catalogue import MODEL_SPEC_FIELDS, model_spec_delete
from runs.services.run_start import MAX_REASON_CHARS, run_start

_NAME_MAX = Experiment._meta.get_field("name").max_length


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------


@org_page()
def models_list(request, membership):
    gpu_types = GpuType.by_memory()
    models = scoped(membership, ModelSpec).order_by("name", "id")
    context = org_context(
        membership,
        rows=[(model, fit.model_fit_rows(model, gpu_types)) for model in models],
        fit_counts=fit.FIT_GPU_COUNTS,
        utilization=fit.FIT_GPU_MEMORY_UTILIZATION,
    )
    return render(request, "frontend/experiments/models_list.html", context)


def _render_model_form(request, membership, *, values, fields=None, model=None, preset=""):
    gpu_types = GpuType.by_memory()
    context = org_context(
        membership,
        values=values,
        slots=form_slots.errors_by_slot(fields or {}),
        model=model,
        fit_rows=fit.model_fit_rows(model, gpu_types) if model else None,
        used_by=list(model.experiments.order_by("name").only("id", "name")) if model else [],
        fit_counts=fit.FIT_GPU_COUNTS,
        utilization=fit.FIT_GPU_MEMORY_UTILIZATION,
        presets=sorted(MODEL_PRESETS.items(), key=lambda item: item[1].name),
        preset=preset,
        dtypes=WeightDtype.values,
    )
    return render(request, "frontend/experiments/model_form.html", context)


@org_page("GET", "POST", need=Need.WRITE)
def model_new(request, membership):
    if request.method == "POST":
        values = model_form.model_form_from_post(request.POST)
        model, fields = model_form.model_submit(
            values=values,
            membership=membership,
            actor=actor_from_request(request),
            model=None,
            upload=request.FILES.get("hf_config_file"),
        )
        if model is not None:
            messages.success(request, f"Registered {model.name}.")
            return redirect("model-edit", membership.organization.slug, model.id)
        return _render_model_form(request, membership, values=values, fields=fields)
    preset = request.GET.get("preset", "")
    known = MODEL_PRESETS.get(preset)
    fields = known.registered if known else {"revision": "main", "dtype": WeightDtype.BFLOAT16}
    values = model_form.model_form_from_fields({"revision": "main"} | fields)
    return _render_model_form(request, membership, values=values, preset=preset)


@org_page("GET", "POST", need=Need.WRITE)
def model_edit(request, membership, model_id):
    model = access_model_spec(membership=membership, model_id=model_id)
    if request.method == "POST":
        values = model_form.model_form_from_post(request.POST)
        saved, fields = model_form.model_submit(
            values=values,
            membership=membership,
            actor=actor_from_request(request),
            model=model,
            upload=request.FILES.get("hf_config_file"),
        )
        if saved is not None:
            messages.success(request, f"Saved {saved.name}.")
            return redirect("models", membership.organization.slug)
        return _render_model_form(request, membership, values=values, fields=fields, model=model)
    values = model_form.model_form_from_fields({f: getattr(model, f) for f in MODEL_SPEC_FIELDS})
    return _render_model_form(request, membership, values=values, model=model)


@org_page("POST", need=Need.WRITE)
def model_delete(request, membership, model_id):
    """Deletes a model no experiment uses (the service refuses otherwise, and keeps it)."""
    model = access_model_spec(membership=membership, model_id=model_id)
    try:
        model_spec_delete(model=model, actor=actor_from_request(request))
    except Conflict as exc:
        messages.error(request, f"{model.name}: {exc}")
        return redirect("model-edit", membership.organization.slug, model.id)
    messages.success(request, f"Deleted {model.name}.")
    return redirect("models", membership.organization.slug)


# ---------------------------------------------------------------------------------------------
# Experiments
# ---------------------------------------------------------------------------------------------


@org_page()
def experiments_list(request, membership):
    experiments = (
        scoped(membership, Experiment)
        .select_related("model", "gpu_type")
        .annotate(run_count=Count("runs"), last_run_at=Max("runs__created_at"))
        .order_by("-created_at", "-id")[:200]
    )
    rows = [(e, builder.experiment_trials(e)) for e in experiments]
    return render(
        request,
        "frontend/experiments/experiments_list.html",
        org_context(membership, rows=rows),
    )


SEARCH_STRATEGY_CHOICES = (
    ("exhaustive", "Exhaustive: every configuration"),
    ("prune", "Prune on the simulator, then measure the survivors"),
    ("halving", "Successive halving: brief looks, the best measured longer"),
    ("bayes", "Bayesian (Optuna TPE)"),
    ("prune+halving", "Prune, then halving"),
)


def _dataset_groups(membership) -> list[tuple[str, list[WorkloadDataset]]]:
    """The organization's datasets by format (label, datasets by name), for the builder's
    choice: the script shows only the group the dataset kind names."""
    labels = dict(DATASET_FORMAT_CHOICES)
    groups: dict[str, list[WorkloadDataset]] = {}
    for dataset in scoped(membership, WorkloadDataset).order_by("name", "id"):
        groups.setdefault(dataset.format, []).append(dataset)
    return [(labels[name], groups[name]) for name in labels if name in groups]


def _evaluation_choices(membership) -> list[tuple[str, list[tuple[str, str]]]]:
    """What the builder's evaluation set may be, by group: the built-in packs and the
    organization's uploaded sets, each as (the input's value, its label)."""
    packs = [
        (f"pack:{pack.name}", f"{pack.name} ({items_text(pack.summary['items'])})")
        for pack in builtin_packs()
    ]
    uploaded = [
        (
            f"set:{s.id}",
            f"{s.name} ({items_text(s.items)}{', needs a judge' if s.needs_judge else ''})",
        )
        for s in scoped(membership, EvaluationSet).order_by("name", "id")
    ]
    groups = (("Built-in packs", packs), ("Uploaded sets", uploaded))
    return [(label, options) for label, options in groups if options]


def _render_builder(request, membership, *, form, outcome, experiment=None):
    org = membership.organization
    labels = dict(DATASET_FORMAT_CHOICES)
    if experiment is None:
        action = reverse("experiment-new", args=[org.slug])
        check = reverse("experiment-check", args=[org.slug])
        predict = reverse("experiment-builder-predict", args=[org.slug])
    else:
        action = reverse("experiment-edit", args=[org.slug, experiment.id])
        check = reverse("experiment-edit-check", args=[org.slug, experiment.id])
        predict = reverse("experiment-edit-builder-predict", args=[org.slug, experiment.id])
    flags = builder.serve_flag_choices()
    evaluation_choices = _evaluation_choices(membership)
    context = org_context(
        membership,
        experiment=experiment,
        form=form.padded(),
        v=form.values,
        slots=outcome.slots,
        invalid_flags=form_slots.invalid_grid_flags(outcome.fields),
        trials=outcome.trials,
        estimate=estimate_panel.estimate_json(outcome.estimate),
        prediction=prediction_panel.prediction_json(outcome.prediction),
        fit=fit.builder_fit_json(form, membership),
        action_url=action,
        check_url=check,
        predict_url=predict,
        models=scoped(membership, ModelSpec).order_by("name", "id"),
        gpu_types=GpuType.objects.order_by("display_name"),
        dataset_groups=_dataset_groups(membership),
        trace_kinds=[(kind, labels[kind]) for kind in TRACE_FORMATS],
        trace_kinds_text=" ".join(TRACE_FORMATS),
        dataset_defaults=form_slots.DATASET_DEFAULTS,
        burstgpt_log_types=BURSTGPT_LOG_TYPES,
        flags=flags,
        flag_names={flag["name"] for flag in flags},
        engines=Engine.values,
        existing_endpoints=scoped(membership, Endpoint).order_by("name"),
        evaluation_choices=evaluation_choices,
        # A choice that is no longer offered (a set deleted since) stays shown, to be named.
        evaluation_unknown=form.values.get("evaluation_source", "")
        not in {"", *(value for _, options in evaluation_choices for value, _ in options)},
        evaluation_max_concurrency=MAX_EVALUATION_CONCURRENCY,
        clouds=CloudType.values,
        slo_names=form_slots.SLO_NAMES,
        slo_percentiles=SLO_PERCENTILES,
        search_strategies=SEARCH_STRATEGY_CHOICES,
    )
    return render(request, "frontend/experiments/builder.html", context)


def _submit(request, membership, form, experiment, *, save: bool, predict: bool = False):
    """The builder's form checked as the API would; stored too when ``save``; predicted on
    the simulator too when ``predict``."""
    return builder.builder_submit(
        form=form,
        membership=membership,
        actor=actor_from_request(request),
        experiment=experiment,
        save=save,
        predict=predict,
    )


def _builder_post(request, membership, experiment=None):
    form = builder.builder_form_from_post(request.POST)
    action = request.POST.get("action")
    save = action not in ("check", "predict")
    outcome = _submit(request, membership, form, experiment, save=save, predict=action == "predict")
    if outcome.experiment is not None:
        done = "Saved" if experiment is not None else "Created"
        messages.success(request, f"{done} experiment {outcome.experiment.name}.")
        return redirect("experiment-detail", membership.organization.slug, outcome.experiment.id)
    return _render_builder(request, membership, form=form, outcome=outcome, experiment=experiment)


@org_page("GET", "POST", need=Need.WRITE)
def experiment_new(request, membership):
    if request.method == "POST":
        return _builder_post(request, membership)
    h100 = GpuType.objects.filter(id="NVIDIA H100 80GB HBM3").first() or GpuType.objects.first()
    models = list(scoped(membership, ModelSpec).order_by("name", "id"))
    first_model = fit.model_for_one_gpu(models, h100)
    form = builder.blank_builder_form(
        model_id=str(first_model.id) if first_model else "",
        gpu_type_id=h100.id if h100 else "",
    )
    outcome = builder.BuilderOutcome(
        trials=builder.form_trials(builder.experiment_payload(form)[0])
    )
    return _render_builder(request, membership, form=form, outcome=outcome)


def _checked_on_open(request, membership, form, experiment=None):
    """The builder opened on a stored experiment: checked at once, so the page shows its
    trials and estimate even without JavaScript."""
    outcome = _submit(request, membership, form, experiment, save=False)
    return _render_builder(request, membership, form=form, outcome=outcome, experiment=experiment)


@org_page("GET", "POST", need=Need.WRITE)
def experiment_edit(request, membership, experiment_id):
    experiment = access_experiment(membership=membership, experiment_id=experiment_id)
    if request.method == "POST":
        return _builder_post(request, membership, experiment)
    form = builder.builder_form_from_experiment(experiment)
    return _checked_on_open(request, membership, form, experiment)


def _copy_name(membership, name: str) -> str:
    """'copy of NAME', numbered when that name is taken too."""
    taken = set(scoped(membership, Experiment).values_list("name", flat=True))
    base = f"copy of {name}"[:_NAME_MAX]
    candidate, number = base, 2
    while candidate in taken:
        suffix = f" ({number})"
        candidate = base[: _NAME_MAX - len(suffix)] + suffix
        number += 1
    return candidate


@org_page(need=Need.WRITE)
def experiment_duplicate(request, membership, experiment_id):
    original = access_experiment(membership=membership, experiment_id=experiment_id)
    copy_name = _copy_name(membership, original.name)
    form = builder.builder_form_from_experiment(original, name=copy_name)
    return _checked_on_open(request, membership, form)


@org_page("POST")
def experiment_check(request, membership, experiment_id=None):
    """The builder's live check: the form as it stands, validated as the API would and
    estimated; nothing stored. Always 200: a draft with errors is a normal answer here."""
    experiment = None
    if experiment_id is not None:
        experiment = access_experiment(membership=membership, experiment_id=experiment_id)
    form = builder.builder_form_from_post(request.POST)
    outcome = _submit(request, membership, form, experiment, save=False)
    return JsonResponse(
        {
            "ok": outcome.ok,
            "trials": outcome.trials,
            "fields": outcome.fields,
            "slots": outcome.slots,
            "estimate": estimate_panel.estimate_json(outcome.estimate),
            "fit": fit.builder_fit_json(form, membership),
        }
    )


@org_page("POST")
def experiment_predict(request, membership, experiment_id=None):
    """The builder's prediction: the form as it stands, checked as the API would, then every
    configuration run on the simulator; nothing stored. 200 with the errors when the form is
    not valid yet, as the live check answers."""
    experiment = None
    if experiment_id is not None:
        experiment = access_experiment(membership=membership, experiment_id=experiment_id)
    form = builder.builder_form_from_post(request.POST)
    outcome = _submit(request, membership, form, experiment, save=False, predict=True)
    return JsonResponse(
        {
            "ok": outcome.ok,
            "slots": outcome.slots,
            "prediction": prediction_panel.prediction_json(outcome.prediction),
        }
    )


def _slo_text(slos: dict) -> str:
    """The SLOs in the protocol's text form (``ttft:p95<300ms, attainment>=95%``)."""
    try:
        return Slos.model_validate(slos or {}).describe() or "none"
    except ValueError:  # stored before a rule it now breaks: shown as stored
        return json.dumps(slos)


def render_detail(
    request,
    membership,
    experiment,
    *,
    start_errors=None,
    reason="",
    schedule_errors=None,
    schedule_values=None,
):
    """The experiment's page; a refused start or schedule shows its errors and what was typed."""
    runs = experiment.runs.select_related("started_by").order_by("-created_at", "-id")[:100]
    runs = with_simulated(list(runs))
    for run in runs:
        # What each pod ran: the vLLM × CUDA × driver pairs a failure class may point at.
        run.stacks = [str(stack) for stack in run_stacks(run)]
    estimate = experiment_estimate(experiment=experiment)
    # The answer at the top is the latest succeeded run's: a failed one answers nothing.
    latest = experiment.runs.filter(state=RunState.SUCCEEDED).order_by("-created_at", "-id").first()
    found = experiment_schedule(experiment)
    schedule = schedule_state(found) if found is not None else None
    context = org_context(
        membership,
        experiment=experiment,
        trials=builder.experiment_trials(experiment),
        estimate=estimate_panel.estimate_json(estimate),
        raw_estimate=estimate,
        runs=runs,
        grid_json=experiment.serve_grid,
        slo_text=_slo_text(experiment.slos),
        latest=latest,
        answer=run_answer_state(run=latest) if latest is not None else None,
        start_slots=form_slots.errors_by_slot(start_errors or {}),
        reason=reason,
        reason_max=MAX_REASON_CHARS,
        schedule=schedule,
        schedule_slots=schedule_errors or {},
        schedule_values=schedule_values or schedule_form_values(schedule),
    )
    return render(request, "frontend/experiments/detail.html", context)


@org_page()
def experiment_detail(request, membership, experiment_id):
    experiment = access_experiment(membership=membership, experiment_id=experiment_id)
    return render_detail(request, membership, experiment)


@org_page("POST", need=Need.WRITE)
def experiment_start(request, membership, experiment_id):
    experiment = access_experiment(membership=membership, experiment_id=experiment_id)
    reason = request.POST.get("reason", "")
    try:
        run = run_start(
            actor=actor_from_request(request),
            experiment=experiment,
            reason=reason,
            trigger=RunTrigger.UI,
        )
    except DomainValidationError as exc:
        return render_detail(
            request, membership, experiment, start_errors=exc.fields, reason=reason
        )
    return redirect(reverse("run-detail", args=[membership.organization.slug, run.id]))
