"""Django admin for staff. Writes that must be audited (members, tokens, models, prices,
experiments, budgets) go through the API or the management commands, so those appear here
read-only; the audit log cannot be changed at all, and secrets are never shown."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin

from runs.models import (
    ApiToken,
    AuditEvent,
    Budget,
    Experiment,
    GpuType,
    Membership,
    ModelSpec,
    Organization,
    Run,
    User,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Staff can look, not touch: changes here would bypass the audit log."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(User)
class UserAdmin(DjangoUserAdmin):
    ordering = ["email"]
    list_display = ["email", "name", "is_staff", "is_active", "date_joined"]
    search_fields = ["email", "name"]
    fieldsets = [
        (None, {"fields": ["email", "password"]}),
        ("Profile", {"fields": ["name"]}),
        ("Permissions", {"fields": ["is_active", "is_staff", "is_superuser"]}),
    ]
    add_fieldsets = [(None, {"classes": ["wide"], "fields": ["email", "password1", "password2"]})]
    filter_horizontal = []
    list_filter = ["is_staff", "is_active"]


@admin.register(Organization)
class OrganizationAdmin(ReadOnlyAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]


@admin.register(Membership)
class MembershipAdmin(ReadOnlyAdmin):
    list_display = ["organization", "user", "role", "created_at"]
    list_filter = ["role", "organization"]


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    list_display = ["organization", "name", "prefix", "user", "last_used_at", "revoked_at"]
    list_filter = ["organization"]
    exclude = ["token_hash"]


@admin.register(ModelSpec)
class ModelSpecAdmin(ReadOnlyAdmin):
    list_display = ["organization", "name", "hf_repo", "revision", "parameter_count"]
    list_filter = ["organization"]


@admin.register(GpuType)
class GpuTypeAdmin(ReadOnlyAdmin):
    list_display = ["id", "memory", "price_secure_usd_hr", "price_community_usd_hr", "price_as_of"]

    @admin.display(description="memory (GiB)")
    def memory(self, gpu: GpuType) -> str:
        return f"{gpu.hardware.memory_gib:.1f}" if gpu.hardware else "unknown"


@admin.register(Experiment)
class ExperimentAdmin(ReadOnlyAdmin):
    list_display = ["organization", "name", "model", "gpu_type", "gpu_count", "engine"]
    list_filter = ["organization", "engine"]


@admin.register(Budget)
class BudgetAdmin(ReadOnlyAdmin):
    list_display = ["organization", "month", "experiment", "limit_usd"]
    list_filter = ["organization"]


class PodUnreachableFilter(admin.SimpleListFilter):
    """Runs whose pod the site cannot reach to terminate (it may still be billed)."""

    title = "pod out of reach"
    parameter_name = "pod_unreachable"

    def lookups(self, request, model_admin):
        return [("yes", "Yes")]

    def queryset(self, request, queryset):
        return queryset.exclude(pod_unreachable="") if self.value() == "yes" else queryset


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "organization",
        "experiment",
        "state",
        "cost_usd",
        "created_at",
        "pod_out_of_reach",
    ]
    list_filter = ["state", PodUnreachableFilter, "organization"]
    exclude = ["run_token_hash"]

    @admin.display(boolean=True, description="pod out of reach")
    def pod_out_of_reach(self, run: Run) -> bool:
        return bool(run.pod_unreachable)


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["organization", "seq", "event", "actor_label", "target_repr", "created_at"]
    list_filter = ["organization", "event"]
