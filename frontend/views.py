"""Pages. Like the API, they reach tenant rows only through ``runs.access``."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from frontend.org_pages import org_context, org_page
from runs.access import Principal, principal_memberships, scoped
from runs.models import Experiment, ModelSpec


@login_required
def home(request):
    memberships = principal_memberships(Principal(user=request.user))
    return render(request, "frontend/home.html", {"memberships": memberships})


@org_page()
def org_overview(request, membership):
    context = org_context(
        membership,
        models=scoped(membership, ModelSpec).order_by("name")[:100],
        experiments=scoped(membership, Experiment).select_related("model", "gpu_type")[:100],
    )
    return render(request, "frontend/org_overview.html", context)
