"""The base of every organization-scoped API view: tenancy and role are settled before the
handler runs, through ``runs.access`` and nothing else."""

from __future__ import annotations

from rest_framework import viewsets
from rest_framework.permissions import SAFE_METHODS

from runs.access import Need, access_membership, principal_from_request, scoped
from runs.actors import actor_from_request


class OrgScopedViewSet(viewsets.GenericViewSet):
    """Resolves ``self.membership`` (404 for strangers, 403 for a role that may not) and
    ``self.actor``. ``get_queryset`` returns only the organization's rows of ``model``."""

    model = None
    read_need = Need.READ
    write_need = Need.WRITE
    # Actions that only read although sent with POST (e.g. validating a draft).
    read_only_actions: tuple[str, ...] = ()

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        reads = request.method in SAFE_METHODS or self.action in self.read_only_actions
        self.membership = access_membership(
            principal=principal_from_request(request),
            org_slug=kwargs["org"],
            need=self.read_need if reads else self.write_need,
        )
        self.actor = actor_from_request(request)

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation has no tenant
            return self.model.objects.none()
        return scoped(self.membership, self.model)

    def get_serializer_context(self):
        context = super().get_serializer_context()
        context["membership"] = getattr(self, "membership", None)
        return context

    @property
    def org(self):
        return self.membership.organization
