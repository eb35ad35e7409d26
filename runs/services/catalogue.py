"""Registered models, per-organization GPU prices, and GPU types the provider's listing adds
to the global catalogue."""

from __future__ import annotations

import copy
import datetime
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.db.models import ProtectedError

from agents.protocol import hf_repo_problem, revision_problem
from runs.actors import Actor
from runs.audit import audit_record, audit_snapshot
from runs.errors import Conflict, DomainValidationError
from runs.experiment_spec import experiment_spec_check
from runs.model_config import model_facts_problem
from runs.models import GpuPriceOverride, GpuType, ModelSpec, Organization
from runs.models.catalogue import MODEL_SPEC_FIELDS
from runs.services.audited_writes import (
    clean_instance,
    create_recorded,
    delete_recorded,
    update_recorded,
)


def _check_model_spec(org: Organization, spec: dict, *, exclude_id=None) -> None:
    errors: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    for field, problem in (
        ("hf_repo", hf_repo_problem(spec["hf_repo"])),
        ("revision", revision_problem(spec["revision"])),
    ):
        if problem:
            add(field, problem)
    if spec["num_kv_heads"] > spec["num_attention_heads"]:
        add("num_kv_heads", "Cannot exceed num_attention_heads.")
    elif spec["num_attention_heads"] % spec["num_kv_heads"]:
        add("num_kv_heads", "Must divide num_attention_heads (grouped-query attention).")
    if spec["max_context"] < 16:
        add("max_context", "Must be at least 16 tokens.")
    duplicate = ModelSpec.objects.filter(
        organization=org, hf_repo=spec["hf_repo"], revision=spec["revision"]
    ).exclude(pk=exclude_id)
    if duplicate.exists():
        add("hf_repo", "This repo and revision is already registered in the organization.")
    if errors:
        raise DomainValidationError(errors)
    # The columns and the facts read from the config.json must describe one model, as
    # ModelSpec.facts and every job of it will read them (a typed column can contradict them).
    problem = model_facts_problem(spec)
    if problem:
        raise DomainValidationError.single(
            "architecture",
            f"These facts do not describe one model ({problem}): give the model's config.json "
            "again (hf_config), or change the columns back.",
        )


@transaction.atomic
def model_spec_create(*, org: Organization, actor: Actor, **fields) -> ModelSpec:
    """Registers a model. Architecture facts are checked for consistency first: the columns
    and ``architecture`` (the facts beyond them that ``runs.model_config`` read from its
    config.json; none: ``{}``) must give ``ModelFacts``."""
    defaults = {"revision": "main", "licence": "", "notes": "", "architecture": {}}
    spec = {"dtype": ModelSpec._meta.get_field("dtype").default, **defaults, **fields}
    _check_model_spec(org, spec)
    model = ModelSpec(organization=org, created_by=actor.user, **spec)
    return create_recorded(instance=model, actor=actor, event="model.create")


@transaction.atomic
def model_spec_update(*, model: ModelSpec, actor: Actor, **changes) -> ModelSpec:
    """Changes a registered model; a smaller context must still fit its experiments' grids.
    Its ``architecture`` stays unless ``changes`` give one (a config.json read again), and
    must still agree with the columns."""
    model = ModelSpec.objects.select_for_update().get(pk=model.pk)
    kept = {field: getattr(model, field) for field in (*MODEL_SPEC_FIELDS, "architecture")}
    merged = kept | changes
    _check_model_spec(model.organization, merged, exclude_id=model.pk)
    _check_context_still_fits(model, merged["max_context"])
    return update_recorded(instance=model, changes=changes, actor=actor, event="model.update")


def _check_context_still_fits(model: ModelSpec, max_context: int) -> None:
    for experiment in model.experiments.only("name", "serve_grid"):
        lengths = experiment.serve_grid.get("max_model_len", [])
        if any(length > max_context for length in lengths):
            raise DomainValidationError.single(
                "max_context",
                f"Experiment {experiment.name!r} uses max_model_len up to {max(lengths)}.",
            )
    if max_context >= model.max_context:
        return
    # Without max_model_len in the grid the model's context is what every request of the
    # workload must fit: check each experiment again as if the model were already shrunk.
    shrunk = copy.copy(model)
    shrunk.max_context = max_context
    for experiment in model.experiments.select_related("gpu_type"):
        try:
            experiment_spec_check(
                org=model.organization,
                model=shrunk,
                gpu_type=experiment.gpu_type,
                gpu_count=experiment.gpu_count,
                engine=experiment.engine,
                engine_image_tag=experiment.engine_image_tag,
                serve_grid=experiment.serve_grid,
                workload=experiment.workload,
                slos=experiment.slos,
            )
        except DomainValidationError as exc:
            field, messages = next(iter(exc.fields.items()))
            raise DomainValidationError.single(
                "max_context",
                f"Experiment {experiment.name!r} would not fit ({field}: {messages[0]})",
            ) from None


@transaction.atomic
def model_spec_delete(*, model: ModelSpec, actor: Actor) -> None:
    """Deletes a model that no experiment uses."""
    if model.experiments.exists():
        raise Conflict("This model is used by experiments; delete or change them first.")
    try:
        delete_recorded(instance=model, actor=actor, event="model.delete")
    except ProtectedError:  # an experiment appeared since the check: keep everything
        raise Conflict("This model is used by experiments; delete or change them first.") from None


@transaction.atomic
def gpu_price_set(
    *,
    org: Organization,
    gpu_type: GpuType,
    actor: Actor,
    price_secure_usd_hr: Decimal | None,
    price_community_usd_hr: Decimal | None,
    note: str = "",
) -> GpuPriceOverride:
    """The organization's own price for a GPU type, replacing the catalogue's for its estimates
    and reports."""
    if price_secure_usd_hr is None and price_community_usd_hr is None:
        raise DomainValidationError.single(
            "price_secure_usd_hr", "Give at least one price (secure or community)."
        )
    values = {
        "price_secure_usd_hr": price_secure_usd_hr,
        "price_community_usd_hr": price_community_usd_hr,
        "note": note,
    }
    override = (
        GpuPriceOverride.objects.select_for_update()
        .filter(organization=org, gpu_type=gpu_type)
        .first()
    )
    if override is None:
        override = GpuPriceOverride(organization=org, gpu_type=gpu_type, **values)
        return create_recorded(instance=override, actor=actor, event="gpu_price.set")
    return update_recorded(instance=override, changes=values, actor=actor, event="gpu_price.set")


@transaction.atomic
def gpu_price_clear(*, org: Organization, gpu_type: GpuType, actor: Actor) -> None:
    """Drops the organization's price; the catalogue's applies again. Clearing none is a no-op."""
    override = GpuPriceOverride.objects.filter(organization=org, gpu_type=gpu_type).first()
    if override is None:
        return
    delete_recorded(instance=override, actor=actor, event="gpu_price.clear")


@transaction.atomic
def gpu_type_add_listed(
    *,
    gpu_id: str,
    display_name: str,
    price_secure_usd_hr: Decimal | None,
    price_community_usd_hr: Decimal | None,
    price_source: str,
    price_as_of: datetime.date,
    actor: Actor,
) -> GpuType | None:
    """Adds a GPU type the provider lists to the global catalogue; None (and nothing written)
    when the catalogue already has it, so two passes at once add it once; values the
    catalogue cannot hold are a ``DomainValidationError``, nothing written. The catalogue is
    every organization's, so each organization's audit log records ``gpu_type.create`` with
    the new row, in the same transaction."""
    gpu = GpuType(
        id=gpu_id,
        display_name=display_name,
        price_secure_usd_hr=price_secure_usd_hr,
        price_community_usd_hr=price_community_usd_hr,
        price_source=price_source,
        price_as_of=price_as_of,
    )
    clean_instance(gpu)  # lengths and price digits: a DomainValidationError, nothing written
    try:
        with transaction.atomic():
            gpu.save(force_insert=True)
    except IntegrityError:  # already in the catalogue (maybe added a moment ago)
        return None
    after = audit_snapshot(gpu)
    for org in Organization.objects.order_by("pk"):
        audit_record(org=org, actor=actor, event="gpu_type.create", target=gpu, after=after)
    return gpu
