"""Organization settings: members and roles, API tokens, budgets and the Runpod key.

Every view is an ``org_page``: the caller's membership is settled first (404 for a stranger,
403 for a role that may not). Each parses its form with the API's serializer and calls the API's
service, so the rules, the audit trail and the field-named errors are the API's. Nothing
secret is rendered, except a new API token, once, in the answer to the request that made it.
"""

from __future__ import annotations

import re

from django.contrib import messages
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache

from frontend.org_pages import org_context, org_page
from frontend.validation import error_summary, parse_as_api
from runs.access import Need, access_budget, access_member, access_token, scoped
from runs.actors import actor_from_request
from runs.costs import month_start
from runs.errors import Conflict, DomainValidationError
from runs.inputs.credentials import ProviderKeySetSerializer
from runs.inputs.experiments import BudgetSerializer
from runs.inputs.tenancy import MemberAddSerializer, MemberRoleSerializer, TokenCreateSerializer
from runs.models import (
    ApiToken,
    Budget,
    CredentialProvider,
    Experiment,
    Membership,
    ProviderCredential,
    Role,
)
from runs.selectors.spend import budget_capping_month, org_month_spend_usd
from runs.services.budgets import budget_delete, budget_set
from runs.services.credentials import provider_key_clear, provider_key_set
from runs.services.tenancy import (
    membership_add_by_email,
    membership_change_role,
    membership_remove,
    token_acts_as,
    token_create,
    token_revoke,
)

# The label of each API field on the pages' forms (the error summary links to the control).
_MEMBER_LABELS = {"email": "E-mail address", "role": "Role"}
_TOKEN_LABELS = {"name": "Token name", "user": "Acts as"}
_BUDGET_LABELS = {
    "limit_usd": "Limit (USD)",
    "month": "Month",
    "experiment": "Experiment",
    "note": "Note",
}
# <input type="month"> sends "2025-07"; the API takes the month's first day.
_MONTH_INPUT = re.compile(r"^\d{4}-\d{2}$")


def _describe(fields: dict[str, list[str]]) -> str:
    """Field-named errors in one line, as the API's message says them."""
    return "; ".join(f"{field}: {' '.join(texts)}" for field, texts in fields.items())


@org_page()
def org_settings(request, membership):
    """The settings overview: a summary of each section the caller may open."""
    context = org_context(
        membership,
        section="overview",
        member_count=scoped(membership, Membership).count(),
        budget_count=scoped(membership, Budget).count(),
    )
    if context["can_manage"]:
        context["active_token_count"] = (
            scoped(membership, ApiToken).filter(revoked_at__isnull=True).count()
        )
        context["runpod_key"] = _credential(membership, CredentialProvider.RUNPOD)
        context["hf_token"] = _credential(membership, CredentialProvider.HUGGINGFACE)
    return render(request, "frontend/org/settings.html", context)


# ---- Members and roles: everyone reads; owners and admins change ----


@org_page("GET", "POST", post=Need.MANAGE)
def org_members(request, membership):
    writing = request.method == "POST"
    errors: dict[str, list[str]] = {}
    if writing:
        try:
            data = parse_as_api(MemberAddSerializer, request.POST)
            member = membership_add_by_email(
                org=membership.organization,
                email=data["email"],
                role=data["role"],
                actor=actor_from_request(request),
            )
        except DomainValidationError as exc:
            errors = exc.fields
        else:
            messages.success(request, f"Added {member.user.email} as {member.role}.")
            return redirect("org-members", membership.organization.slug)
    members = scoped(membership, Membership).select_related("user").order_by("created_at", "pk")
    is_owner = membership.role == Role.OWNER
    context = org_context(
        membership,
        section="members",
        members=members,
        errors=errors,
        summary=error_summary(errors, _MEMBER_LABELS),
        values=request.POST if writing else {},
        # Only an owner may grant or take away the owner role (the service enforces it).
        grantable_roles=[r for r in Role if is_owner or r != Role.OWNER],
        is_owner=is_owner,
    )
    return render(request, "frontend/org/members.html", context)


@org_page("POST", need=Need.MANAGE)
def org_member_role(request, membership, member_id: int):
    member = access_member(membership=membership, member_id=member_id)
    try:
        data = parse_as_api(MemberRoleSerializer, request.POST)
        membership_change_role(
            membership=member, role=data["role"], actor=actor_from_request(request)
        )
    except DomainValidationError as exc:
        messages.error(request, f"{member.user.email}: {_describe(exc.fields)}")
    except Conflict as exc:
        messages.error(request, f"{member.user.email}: {exc}")
    else:
        messages.success(request, f"{member.user.email} is now {data['role']}.")
    return redirect("org-members", membership.organization.slug)


@org_page("POST", need=Need.MANAGE)
def org_member_remove(request, membership, member_id: int):
    member = access_member(membership=membership, member_id=member_id)
    email = member.user.email
    try:
        membership_remove(membership=member, actor=actor_from_request(request))
    except Conflict as exc:
        messages.error(request, f"{email}: {exc}")
        return redirect("org-members", membership.organization.slug)
    messages.success(request, f"Removed {email}; their API tokens here are revoked.")
    if member.pk == membership.pk:
        return redirect("home")  # they left: this organization's pages are closed to them now
    return redirect("org-members", membership.organization.slug)


# ---- API tokens: owners and admins only, as in the API ----


@never_cache  # the answer to a create carries the token: no cache may keep it
@org_page("GET", "POST", need=Need.MANAGE)
def org_tokens(request, membership):
    errors: dict[str, list[str]] = {}
    issued = None
    if request.method == "POST":
        # An empty choice means "myself", as leaving ``user`` out does in the API.
        data = {k: v for k, v in request.POST.items() if k in ("name", "user") and v != ""}
        try:
            values = parse_as_api(TokenCreateSerializer, data)
            user = token_acts_as(
                org=membership.organization, email=values.get("user"), caller=membership.user
            )
            issued = token_create(
                org=membership.organization,
                user=user,
                name=values["name"],
                actor=actor_from_request(request),
            )
        except DomainValidationError as exc:
            errors = exc.fields
    tokens = scoped(membership, ApiToken).select_related("user").order_by("-created_at", "pk")
    context = org_context(
        membership,
        section="tokens",
        tokens=tokens,
        issued=issued,
        errors=errors,
        summary=error_summary(errors, _TOKEN_LABELS),
        values=request.POST if errors else {},
        members=scoped(membership, Membership).select_related("user").order_by("user__email"),
    )
    return render(request, "frontend/org/tokens.html", context)


@org_page("POST", need=Need.MANAGE)
def org_token_revoke(request, membership, token_id):
    token = token_revoke(
        token=access_token(membership=membership, token_id=token_id),
        actor=actor_from_request(request),
    )
    messages.success(request, f"Revoked the token “{token.name}” ({token.prefix}…).")
    return redirect("org-tokens", membership.organization.slug)


# ---- Budgets: everyone reads; owners and admins set and remove ----


@org_page("GET", "POST", post=Need.MANAGE)
def org_budgets(request, membership):
    writing = request.method == "POST"
    errors: dict[str, list[str]] = {}
    if writing:
        data = {
            key: value.strip()
            for key, value in request.POST.items()
            if key in ("limit_usd", "month", "experiment", "note") and value.strip()
        }
        if _MONTH_INPUT.match(data.get("month", "")):
            data["month"] += "-01"
        try:
            values = parse_as_api(BudgetSerializer, data, membership=membership)
            budget = budget_set(
                org=membership.organization,
                actor=actor_from_request(request),
                limit_usd=values["limit_usd"],
                month=values.get("month"),
                experiment=values.get("experiment"),
                note=values.get("note", ""),
            )
        except DomainValidationError as exc:
            errors = exc.fields
        else:
            messages.success(request, f"Set the {_scope_label(budget)} to ${budget.limit_usd}.")
            return redirect("org-budgets", membership.organization.slug)

    org_row = membership.organization
    this_month = month_start(timezone.now())
    budgets = scoped(membership, Budget).select_related("experiment")
    budgets = list(budgets.order_by("-month", "experiment__name"))
    cap = budget_capping_month(budgets, this_month)
    spend = org_month_spend_usd(org=org_row, month=this_month)
    context = org_context(
        membership,
        section="budgets",
        budgets=[(b, _scope_label(b)) for b in budgets],
        errors=errors,
        summary=error_summary(errors, _BUDGET_LABELS),
        values=request.POST if writing else {},
        experiments=scoped(membership, Experiment).order_by("name"),
        this_month=this_month,
        spend=spend,
        cap=cap,
        spend_percent=min(100, int(spend * 100 / cap.limit_usd)) if cap and cap.limit_usd else None,
        over=bool(cap and spend > cap.limit_usd),
    )
    return render(request, "frontend/org/budgets.html", context)


def _scope_label(budget: Budget) -> str:
    if budget.experiment_id:
        return f"budget of experiment “{budget.experiment.name}”"
    if budget.month:
        return f"budget for {budget.month:%B %Y}"
    return "standing monthly budget"


@org_page("POST", need=Need.MANAGE)
def org_budget_delete(request, membership, budget_id: int):
    budget = access_budget(membership=membership, budget_id=budget_id)
    label = _scope_label(budget)
    budget_delete(budget=budget, actor=actor_from_request(request))
    messages.success(request, f"Removed the {label}.")
    return redirect("org-budgets", membership.organization.slug)


# ---- The organization's secrets (the Runpod key, the Hugging Face token): write-only;
# ---- owners and admins see their fingerprints

# Per service: its name on the page, what it is for, and what happens without it.
_SECRET_PAGES = {
    CredentialProvider.RUNPOD: {
        "section": "runpod-key",
        "url": "org-runpod-key",
        "remove_url": "org-runpod-key-remove",
        "title": "Runpod API key",
        "noun": "key",
        "uses": "Runs of this organization rent GPUs with it.",
        "without": "Runs on Runpod cannot start until an owner or admin sets one.",
        "removed": "Removed the Runpod API key. Runs on Runpod need a key again.",
    },
    CredentialProvider.HUGGINGFACE: {
        "section": "hf-token",
        "url": "org-hf-token",
        "remove_url": "org-hf-token-remove",
        "title": "Hugging Face token",
        "noun": "token",
        "uses": "Pods download gated and private models with it (read access is enough).",
        "without": "Public models download without one; gated models (Llama, Gemma, …) "
        "fail with model_access_denied until an owner or admin sets one.",
        "removed": "Removed the Hugging Face token. Gated models need a token again.",
    },
}


def _credential(membership: Membership, provider: CredentialProvider):
    return scoped(membership, ProviderCredential).filter(provider=provider).first()


def _secret_page(request, membership, provider: CredentialProvider):
    page = _SECRET_PAGES[provider]
    errors: dict[str, list[str]] = {}
    if request.method == "POST":
        try:
            data = parse_as_api(ProviderKeySetSerializer, request.POST)
            credential = provider_key_set(
                actor=actor_from_request(request),
                org=membership.organization,
                provider=provider,
                api_key=data["api_key"],
            )
        except DomainValidationError as exc:
            errors = exc.fields  # the messages describe the rule, never the key
        except Conflict as exc:  # pods rented with the stored key hold it
            messages.error(request, str(exc))
            return redirect(page["url"], membership.organization.slug)
        else:
            messages.success(request, f"Saved the {page['title']} {credential.fingerprint}.")
            return redirect(page["url"], membership.organization.slug)
    context = org_context(
        membership,
        section=page["section"],
        page=page,
        credential=_credential(membership, provider),
        errors=errors,
        summary=error_summary(errors, {"api_key": page["title"]}),
    )
    return render(request, "frontend/org/secret_key.html", context)


def _secret_remove(request, membership, provider: CredentialProvider):
    page = _SECRET_PAGES[provider]
    try:
        provider_key_clear(
            actor=actor_from_request(request), org=membership.organization, provider=provider
        )
    except Conflict as exc:  # pods rented with it hold it
        messages.error(request, str(exc))
    else:
        messages.success(request, page["removed"])
    return redirect(page["url"], membership.organization.slug)


@org_page("GET", "POST", need=Need.MANAGE)
def org_runpod_key(request, membership):
    return _secret_page(request, membership, CredentialProvider.RUNPOD)


@org_page("POST", need=Need.MANAGE)
def org_runpod_key_remove(request, membership):
    return _secret_remove(request, membership, CredentialProvider.RUNPOD)


@org_page("GET", "POST", need=Need.MANAGE)
def org_hf_token(request, membership):
    return _secret_page(request, membership, CredentialProvider.HUGGINGFACE)


@org_page("POST", need=Need.MANAGE)
def org_hf_token_remove(request, membership):
    return _secret_remove(request, membership, CredentialProvider.HUGGINGFACE)
