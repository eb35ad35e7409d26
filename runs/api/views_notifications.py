"""Notification hooks of the organization over the API: list, add (a webhook's signing secret
in the answer, once), delete, send a test, read a hook's delivery log. Owners and admins only,
as on the settings page; the same service (``runs.services.notifications``). Too many hooks is
a 409, too many tests (or confirmation rounds) an hour a 429 (``runs.services.hook_limits``)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from runs.access import Need, access_notification_hook
from runs.api.scoping import OrgScopedViewSet
from runs.inputs.notifications import HookCreateSerializer
from runs.models import NotificationDelivery, NotificationHook
from runs.selectors.hook_recipients import hook_addresses
from runs.services.notifications.hooks import hook_create, hook_delete, hook_send_test

DELIVERY_LOG_ROWS = 100


class HookSerializer(serializers.ModelSerializer):
    awaiting_confirmation = serializers.SerializerMethodField(
        help_text="E-mail hooks: the addresses not yet confirmed (nothing is sent to them)."
    )

    class Meta:
        model = NotificationHook
        fields = [
            "id",
            "name",
            "kind",
            "url_host",
            "secret_fingerprint",
            "email_to",
            "awaiting_confirmation",
            "events",
            "enabled",
            "created_at",
        ]
        read_only_fields = fields

    def get_awaiting_confirmation(self, hook) -> list[str]:
        return hook_addresses(hook).awaiting


class CreatedHookSerializer(HookSerializer):
    secret = serializers.CharField(
        read_only=True, allow_null=True, help_text="Webhooks: the signing secret, shown once."
    )

    class Meta(HookSerializer.Meta):
        fields = [*HookSerializer.Meta.fields, "secret"]
        read_only_fields = fields


class DeliverySerializer(serializers.ModelSerializer):
    event = serializers.CharField(source="notification.event", read_only=True)
    summary = serializers.CharField(source="notification.summary", read_only=True)

    class Meta:
        model = NotificationDelivery
        fields = [
            "id",
            "event",
            "summary",
            "status",
            "attempts",
            "last_status_code",
            "last_error",
            "next_attempt_at",
            "last_attempt_at",
            "delivered_at",
            "created_at",
        ]
        read_only_fields = fields


class NotificationHookViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrgScopedViewSet):
    """Where the organization's news goes (docs/operating.md, "Notifications")."""

    model = NotificationHook
    serializer_class = HookSerializer
    read_need = Need.MANAGE
    write_need = Need.MANAGE

    @extend_schema(request=HookCreateSerializer, responses={201: CreatedHookSerializer})
    def create(self, request, org):
        data = HookCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        created = hook_create(org=self.org, actor=self.actor, **data.validated_data)
        body = HookSerializer(created.hook).data | {"secret": created.secret}
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={204: None})
    def destroy(self, request, org, pk):
        hook_delete(
            hook=access_notification_hook(membership=self.membership, hook_id=pk), actor=self.actor
        )
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={202: DeliverySerializer})
    @action(detail=True, methods=["post"])
    def test(self, request, org, pk):
        """Sends a ``test`` event to this hook (after the answer: see its deliveries)."""
        hook = access_notification_hook(membership=self.membership, hook_id=pk)
        delivery = hook_send_test(hook=hook, actor=self.actor)
        return Response(DeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses=DeliverySerializer(many=True))
    @action(detail=True, methods=["get"])
    def deliveries(self, request, org, pk):
        """The hook's delivery log, newest first (the last ``DELIVERY_LOG_ROWS``)."""
        hook = access_notification_hook(membership=self.membership, hook_id=pk)
        rows = hook.deliveries.select_related("notification").order_by("-created_at")
        return Response(DeliverySerializer(rows[:DELIVERY_LOG_ROWS], many=True).data)
