"""An experiment's schedule on its page: set it, pause or resume it, remove it
(``runs.services.schedules``; the page shows it through ``runs.selectors.schedules``)."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect
from django.urls import reverse

from frontend.experiments.schedule_form import SCHEDULE_INPUTS
from frontend.experiments.views import render_detail
from frontend.org_pages import org_page
from runs.access import Need, access_experiment
from runs.actors import actor_from_request
from runs.errors import DomainValidationError
from runs.schedule_spec import schedule_spec
from runs.selectors.schedules import experiment_schedule
from runs.services.schedules import schedule_delete, schedule_pause, schedule_set


def _back(membership, experiment):
    return redirect(
        reverse("experiment-detail", args=[membership.organization.slug, experiment.id])
        + "#schedule"
    )


@org_page("POST", need=Need.WRITE)
def experiment_schedule_set(request, membership, experiment_id):
    experiment = access_experiment(membership=membership, experiment_id=experiment_id)
    # Whole, as typed: schedule_spec refuses what is too long (cut, it could still pass).
    values = {name: str(request.POST.get(name, "")) for name in SCHEDULE_INPUTS}
    try:
        spec = schedule_spec(**values)
        current = experiment_schedule(experiment)
        # Changing when a paused schedule fires does not resume it.
        paused = current is not None and not current.periodic_task.enabled
        schedule_set(
            actor=actor_from_request(request), experiment=experiment, spec=spec, paused=paused
        )
    except DomainValidationError as exc:
        return render_detail(
            request, membership, experiment, schedule_errors=exc.fields, schedule_values=values
        )
    messages.success(request, "Schedule saved: its runs start as you.")
    return _back(membership, experiment)


@org_page("POST", need=Need.WRITE)
def experiment_schedule_state(request, membership, experiment_id):
    experiment = access_experiment(membership=membership, experiment_id=experiment_id)
    schedule = experiment_schedule(experiment)
    action = request.POST.get("action")
    if schedule is not None and action in ("pause", "resume"):
        schedule_pause(
            actor=actor_from_request(request), schedule=schedule, paused=action == "pause"
        )
        messages.success(request, f"Schedule {'paused' if action == 'pause' else 'resumed'}.")
    elif schedule is not None and action == "delete":
        schedule_delete(actor=actor_from_request(request), schedule=schedule)
        messages.success(request, "Schedule removed; the runs it started stay.")
    else:
        messages.error(request, "Nothing to do: the schedule is gone or the action unknown.")
    return _back(membership, experiment)
