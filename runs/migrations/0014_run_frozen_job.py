# Each run stores the job its agent runs (``Run.job_spec``: the protocol's JobSpec less the
# per-attempt deadline, report URLs and run id), and its snapshot keeps only the
# experiment's facts the job lacks. Existing runs get their job from their snapshot, and
# from their experiment (and its model) for what the snapshot lacks; the snapshot keys the
# job now holds are removed, so each fact is stored once.

from django.conf import settings
from django.db import migrations, models

from agents import protocol

# The snapshot's keys that stay (the others — GPU type and count, engine and image tag, serve
# grid, workload, SLOs — move into the job), with the experiment field each is filled from
# when missing.
_KEPT = {
    "name": "name",
    "model": "model_id",
    "cloud_type": "cloud_type",
    "fallback_gpu_types": "fallback_gpu_types",
    "allow_other_cloud": "allow_other_cloud",
    "container_disk_gb": "container_disk_gb",
    "network_volume_id": "network_volume_id",
    "budget_cap_usd": "budget_cap_usd",
}


def _vllm_version_of_tag(tag: str) -> str | None:
    # runs.experiment_spec.vllm_version_of_tag as of this migration (frozen here with it).
    import re

    match = re.match(r"^v?(\d+\.\d+(?:\.\d+)?)", tag or "")
    return match.group(1) if match else None


def _trials(grid) -> list[dict]:
    try:
        configs = protocol.expand_serve_grid(grid or {})
    except protocol.ServeGridError:
        configs = [{}]  # a grid no longer readable: the job keeps vLLM's defaults
    return [{"index": i, "serve_config": config} for i, config in enumerate(configs)]


def _as_sent(model, value: dict) -> dict:
    # As the agent's job carries it (defaults spelled out); a value this protocol refuses
    # is kept as stored, for the reader to refuse.
    try:
        return model.model_validate(value).model_dump(mode="json")
    except ValueError:
        return value


def frozen_job_backfill(apps, schema_editor) -> None:
    Run = apps.get_model("runs", "Run")
    sim_speed = float(getattr(settings, "BENCHSITE_SIM_SPEED", 1.0))
    runs = Run.objects.filter(job_spec={}).select_related("experiment__model")
    for run in runs.iterator(chunk_size=200):
        experiment, model = run.experiment, run.experiment.model
        frozen = dict(run.experiment_snapshot or {})

        def started(key: str, field: str):
            return frozen[key] if key in frozen else getattr(experiment, field)  # noqa: B023

        tag = started("engine_image_tag", "engine_image_tag") or ""
        run.job_spec = {
            "protocol": 1,
            "trials": _trials(started("serve_grid", "serve_grid")),
            "workload": _as_sent(protocol.Workload, started("workload", "workload")),
            "slos": _as_sent(protocol.Slos, started("slos", "slos") or {}),
            "engine": {
                "kind": started("engine", "engine"),
                "image_tag": tag or None,
                "vllm_version": _vllm_version_of_tag(tag),
                "gpu_type": started("gpu_type", "gpu_type_id"),
                "gpu_count": int(started("gpu_count", "gpu_count")),
                "sim_speed": sim_speed,
            },
            "model": {
                "hf_repo": model.hf_repo,
                "revision": model.revision,
                "served_model_name": model.hf_repo,
                "local_path": None,
                "parameter_count": model.parameter_count,
                "num_layers": model.num_layers,
                "hidden_size": model.hidden_size,
                "num_attention_heads": model.num_attention_heads,
                "num_kv_heads": model.num_kv_heads,
                "head_dim": model.head_dim,
                "dtype": model.dtype,
                "max_context": model.max_context,
            },
        }
        kept = {key: started(key, field) for key, field in _KEPT.items()}
        kept["model"] = str(kept["model"])
        kept["budget_cap_usd"] = str(kept["budget_cap_usd"])
        kept["fallback_gpu_types"] = list(kept["fallback_gpu_types"] or [])
        kept["estimate_usd"] = frozen.get("estimate_usd")
        # A run started before estimates were frozen: no estimate, so only its cap bounds it.
        kept["estimate_seconds"] = frozen.get("estimate_seconds", 0)
        run.experiment_snapshot = kept
        run.save(update_fields=["job_spec", "experiment_snapshot"])


def frozen_job_unfold(apps, schema_editor) -> None:
    """Back to the snapshot holding everything (the grid as the list of trials' configs is
    lost: each run's snapshot gets the first trial's flags as one-value lists)."""
    Run = apps.get_model("runs", "Run")
    for run in Run.objects.exclude(job_spec={}).iterator(chunk_size=200):
        job, frozen = run.job_spec, dict(run.experiment_snapshot)
        first = job["trials"][0]["serve_config"] if job["trials"] else {}
        frozen.update(
            gpu_type=job["engine"]["gpu_type"],
            gpu_count=job["engine"]["gpu_count"],
            engine=job["engine"]["kind"],
            engine_image_tag=job["engine"]["image_tag"] or "",
            serve_grid={flag: [value] for flag, value in first.items()},
            workload=job["workload"],
            slos=job["slos"],
        )
        run.experiment_snapshot = frozen
        run.save(update_fields=["experiment_snapshot"])


class Migration(migrations.Migration):
    dependencies = [("runs", "0013_tenant_rows_organization")]

    operations = [
        migrations.AddField(
            model_name="run", name="job_spec", field=models.JSONField(default=dict)
        ),
        migrations.RunPython(frozen_job_backfill, frozen_job_unfold),
    ]
