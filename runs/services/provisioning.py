"""Renting a run's pod, and giving it back.

Guarantees:
- ``run_provision`` claims the run with a conditional UPDATE and a lease (a queued run, or a
  provisioning one whose lease expired and which has no pod recorded), so two workers never
  provision one run at once; a run it cannot claim is left alone.
- The pod is looked up by its idempotency name before anything is rented: a run whose
  earlier attempt created a pod but died before recording it adopts that pod (exactly one
  pod per run, however often provisioning is delivered).
- The pod goes to the first placement (GPU type, cloud) the experiment allows that has
  capacity (``runs.placement``); only a capacity answer moves on to the next one. Where it
  landed is recorded on the run, with the provider's billed rate for it.
- The run token (the same for every attempt, ``runs.services.run_tokens``) has its hash
  committed before the pod is created, so an adopted pod's agent holds a token the site
  accepts; the job and token travel only in the pod's env, and so does the organization's
  Hugging Face token (``HF_TOKEN``, for real vLLM only: never in the job), and an existing
  endpoint's API key (``BENCHSITE_ENDPOINT_API_KEY``). An endpoint's address is checked again
  against the operator's rule before its agent starts (a name may resolve elsewhere now),
  and the agent connects only to the addresses checked then
  (``BENCHSITE_ENDPOINT_ADDRESSES``).
- An existing endpoint's run is billed at the endpoint's price per hour (its frozen one) for
  the agent's lifetime; one priced per token gets the cost of the tokens it measured when it
  ends; one without a price costs nothing we know (``runs.run_as_started.run_cost_is_known``).
- A pod with a network volume keeps the model's weights on it
  (``BENCHSITE_WEIGHTS_DIR``), so a later run with the same volume finds them there.
- Billing starts when the create that rented the pod was sent (``pod_started_at`` is written
  before each create), also for a pod adopted after a crash.
- Provider errors are split: ``TransientProviderError`` releases the lease and is re-raised
  for the task to retry; ``PermanentProviderError`` fails the run with the reason.
- ``run_release_pod`` terminates the run's pod (idempotent) and records the final billed
  seconds and cost.
"""

from __future__ import annotations

import base64
import datetime
import logging
from decimal import Decimal

from django.conf import settings
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from agents import protocol
from runs.costs import billed_seconds, pod_usd_per_hr, run_cost_usd
from runs.models import CredentialProvider, Endpoint, GpuType, Run
from runs.models.runs import RunState
from runs.placement import Placement, recorded_placement
from runs.pod_job import run_job_spec, run_pod_image_tag
from runs.providers.base import (
    PermanentProviderError,
    PodInfo,
    PodSpec,
    PodState,
    Provider,
    TransientProviderError,
)
from runs.providers.names import provider_name_for
from runs.providers.registry import provider_for
from runs.run_as_started import (
    run_endpoint,
    run_endpoint_price,
    run_engine,
    run_placements,
    run_pod_storage,
)
from runs.selectors.endpoint_costs import run_endpoint_token_cost
from runs.selectors.prices import gpu_price
from runs.services.credentials import provider_key_for_run
from runs.services.endpoints import endpoint_api_key_for_run, endpoint_target
from runs.services.evaluation_runs import evaluation_pod_env
from runs.services.level_figures import trial_level_figures_record
from runs.services.outbound import OutboundRefused
from runs.services.run_lifecycle import run_fail, runs_transition
from runs.services.run_tokens import run_token_issue

logger = logging.getLogger(__name__)

LEASE = datetime.timedelta(minutes=5)
# Where Runpod mounts a network volume in a pod; the agent caches weights below it.
NETWORK_VOLUME_WEIGHTS_DIR = "/workspace/benchsite/weights"


def run_claim_for_provisioning(*, run_id, owner: str, task_id: str | None = None) -> Run | None:
    """Takes the provisioning lease of a run that needs a pod; None when another worker
    holds it or the run needs none.

    A lease held under the same broker message (``task_id``) is taken over at once: the
    broker hands a message out again only once its worker is gone (killed, or lost past the
    visibility timeout, far beyond the task's time limit), so waiting out that lease would
    only delay the run."""
    now = timezone.now()
    claimable = Q(state=RunState.QUEUED) | Q(
        state=RunState.PROVISIONING, pod_id="", lease_expires_at__lt=now
    )
    if task_id:
        claimable |= Q(state=RunState.PROVISIONING, pod_id="", lease_owner__endswith=f":{task_id}")
    claimed = runs_transition(
        Run.objects.filter(claimable, id=run_id, cancel_requested_at__isnull=True),
        to=RunState.PROVISIONING,
        lease_owner=owner,
        lease_expires_at=now + LEASE,
    )
    return (
        Run.objects.select_related("experiment", "organization").get(id=run_id) if claimed else None
    )


def _pod_spec(run: Run, token: str, placement: Placement) -> PodSpec:
    container_disk_gb, network_volume_id = run_pod_storage(run)
    ws_url, rest_url = protocol.agent_site_urls(settings.BENCHSITE_PUBLIC_URL, run_id=run.id)
    job = run_job_spec(run, ws_url=ws_url, rest_url=rest_url, placement=placement)
    tag = job.engine.image_tag or "latest"
    image = getattr(settings, "BENCHSITE_AGENT_IMAGE", "benchsite/agent:{tag}").format(tag=tag)
    env = {
        "BENCHSITE_JOB": base64.b64encode(job.model_dump_json().encode()).decode("ascii"),
        "BENCHSITE_TOKEN": token,
    }
    if job.engine.kind == "endpoint":
        env.update(_endpoint_env(run, job.engine.base_url or ""))
    env.update(evaluation_pod_env(run))  # a judge's key, for an evaluation that has one
    if job.engine.kind == "vllm":
        hf_token = provider_key_for_run(run.organization, CredentialProvider.HUGGINGFACE)
        if hf_token:
            env["HF_TOKEN"] = hf_token
        if network_volume_id:
            env["BENCHSITE_WEIGHTS_DIR"] = NETWORK_VOLUME_WEIGHTS_DIR
    return PodSpec(
        name=run.pod_name,
        image=image,
        gpu_type_id=placement.gpu_type_id,
        gpu_count=job.engine.gpu_count,
        cloud_type=placement.cloud_type.upper(),  # the site's "secure" is Runpod's SECURE
        env=env,
        container_disk_gb=container_disk_gb,
        network_volume_id=network_volume_id,
    )


def _endpoint_env(run: Run, base_url: str) -> dict[str, str]:
    """The agent's environment for an existing endpoint: the addresses its host resolves to
    now, checked (else the run fails, naming why), which the agent connects to instead of
    looking the name up again; and its API key."""
    try:
        target = endpoint_target(base_url)
    except OutboundRefused as refused:
        raise PermanentProviderError(f"the endpoint's address is refused: {refused}") from None
    frozen = run_endpoint(run)
    endpoint = Endpoint.objects.filter(organization_id=run.organization_id, id=frozen["id"]).first()
    if endpoint is None:
        raise PermanentProviderError("the run's endpoint has been deleted")
    env = {protocol.ENDPOINT_ADDRESSES_ENV: ",".join(target.addresses)}
    key = endpoint_api_key_for_run(endpoint)
    return env | {protocol.ENDPOINT_API_KEY_ENV: key} if key else env


def _pod_rate(run: Run, provider: str, placement: Placement, pod: PodInfo) -> Decimal | None:
    """What the run is billed per hour: an existing endpoint's price per hour, nothing for
    any other local pod (it rents nothing), else the pod's rate."""
    price = run_endpoint_price(run)
    if run_endpoint(run) is not None:
        return None if price is None else price.usd_per_hour
    return None if provider == "local" else _billed_rate(run, placement, pod.cost_per_hr)


def _billed_rate(run: Run, placement: Placement, pod_cost_per_hr: Decimal | None) -> Decimal | None:
    """The pod's billed rate (USD/h for the whole pod): the provider's, else the catalogue's
    for the placement it took."""
    if pod_cost_per_hr is not None:
        return pod_cost_per_hr
    gpu = GpuType.objects.filter(id=placement.gpu_type_id).first()
    if gpu is None:
        return None
    price = gpu_price(
        org=run.organization, gpu_type=gpu, cloud_type=placement.cloud_type
    ).usd_per_gpu_hour
    return (
        None
        if price is None
        else pod_usd_per_hr(gpu_usd_per_hr=price, gpu_count=run_engine(run).gpu_count)
    )


def _create_at_first_free_placement(
    provider: Provider, run: Run, token: str, owner: str
) -> tuple[PodInfo, Placement]:
    """Creates the pod at the first placement with capacity. Each attempt's placement is
    written to the run before the create, so a pod adopted after a crash is known by where it
    was asked for. Raises a ``TransientProviderError`` naming every placement when none has
    capacity, and any other provider error at once (a rate limit or outage is not a capacity
    answer)."""
    allowed = run_placements(run)
    refused: list[str] = []
    image_tag = run_pod_image_tag(run) or ""
    for placement in allowed:
        Run.objects.filter(id=run.id, lease_owner=owner).update(
            pod_gpu_type=placement.gpu_type_id,
            pod_cloud_type=placement.cloud_type,
            pod_image_tag=image_tag,
            # Billing starts at the create that rents the pod (a few seconds early at most).
            pod_started_at=timezone.now(),
        )
        try:
            return provider.create(_pod_spec(run, token, placement)), placement
        except TransientProviderError as exc:
            if not exc.no_capacity:
                raise
            refused.append(str(placement))
            logger.info("run %s: no capacity at %s", run.id, placement)
    raise TransientProviderError(
        f"No capacity at any placement the experiment allows: {', '.join(refused)}",
        no_capacity=True,
    )


def run_provision(*, run_id, owner: str, task_id: str | None = None) -> str:
    """Rents (or adopts) the run's pod; returns what it did: ``created``, ``adopted`` or
    ``skipped``. Raises ``TransientProviderError`` for the task to retry. ``owner`` names the
    lease holder; ``task_id`` (the broker message's id) lets a redelivery take over its own
    dead predecessor's lease."""
    run = run_claim_for_provisioning(run_id=run_id, owner=owner, task_id=task_id)
    if run is None:
        return "skipped"
    name = provider_name_for(engine=run_engine(run).kind)
    try:
        provider = provider_for(org=run.organization, name=name)
        pod = provider.find_by_name(run.pod_name)
        outcome = "adopted"
        if pod is None:
            token = run_token_issue(run=run)
            pod, placement = _create_at_first_free_placement(provider, run, token, owner)
            outcome = "created"
        else:
            # Asked for before the crash (written before every create), else the run's own.
            placement = recorded_placement(run) or run_placements(run)[0]
    except TransientProviderError:
        Run.objects.filter(id=run.id, lease_owner=owner).update(lease_expires_at=timezone.now())
        raise
    except PermanentProviderError as exc:
        run_fail(run_id=run.id, reason=f"Could not rent a pod: {exc}")
        return "failed"
    now = timezone.now()
    # A pod already running when created (the local provider's process): its cold start's
    # "pod running" moment; others are first seen running by the reconcile pass.
    running = {"pod_running_at": Coalesce(F("pod_running_at"), Value(now))}
    Run.objects.filter(id=run.id, lease_owner=owner).update(
        **(running if pod.state == PodState.RUNNING else {}),
        provider=name,
        pod_id=pod.pod_id,
        pod_gpu_type=placement.gpu_type_id,
        pod_cloud_type=placement.cloud_type,
        # A local "pod" rents nothing: no billed rate, so no spend (reports price its tokens
        # from the catalogue, labelled); an existing endpoint's is its price per hour.
        price_usd_hr=_pod_rate(run, name, placement, pod),
        # Written before the create that rented it (for an adopted pod: before the last
        # attempt's create, which is normally the one that left it).
        pod_started_at=Coalesce(F("pod_started_at"), Value(now)),
        lease_owner="",
        lease_expires_at=None,
    )
    # A local pod has no GPU of the catalogue's: its placement names only what is modelled.
    where = "" if name == "local" else f" at {placement}"
    logger.info("run %s: pod %s %s on %s%s", run.id, pod.pod_id, outcome, name, where)
    return outcome


def run_accrued_cost(run: Run, *, until: datetime.datetime) -> tuple[Decimal, Decimal]:
    """Billed seconds and cost of the run's pods: the earlier ones (a resumed run's) as
    recorded, and the current one from its start to ``until``."""
    earlier_seconds = Decimal(str(run.earlier_pods_seconds))
    earlier_cost = Decimal(run.earlier_pods_cost_usd)
    if run.pod_started_at is None or run.price_usd_hr is None:
        return earlier_seconds, earlier_cost
    seconds = billed_seconds(run.pod_started_at, until)
    cost = run_cost_usd(seconds=seconds, pod_usd_per_hr=run.price_usd_hr)
    return earlier_seconds + seconds, earlier_cost + cost


def run_release_pod(*, run_id) -> bool:
    """Terminates the run's pod (idempotent) and records the final billed seconds and cost;
    keeps its trials' level figures for the reports once it has ended. Returns whether a pod
    was released now."""
    run = Run.objects.select_related("experiment", "organization").get(id=run_id)
    # Its levels are frozen once it has ended: what they give is kept for the reports.
    trial_level_figures_record(run_ids=[run.id])
    if not run.pod_id or run.pod_terminated_at is not None:
        return False
    provider = provider_for(org=run.organization, name=run.provider or "local")
    provider.terminate(run.pod_id)
    now = timezone.now()
    seconds, cost = run_accrued_cost(run, until=now)
    cost += run_endpoint_token_cost(run)
    Run.objects.filter(id=run.id, pod_terminated_at__isnull=True).update(
        pod_terminated_at=now, billed_seconds=float(seconds), cost_usd=cost
    )
    logger.info("run %s: pod %s terminated; %s s billed, $%s", run.id, run.pod_id, seconds, cost)
    return True
