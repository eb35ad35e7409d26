"""Which addresses of an e-mail hook may be written to: those that confirmed it
(``runs.services.hook_recipients`` asks them and records their answer)."""

from __future__ import annotations

from dataclasses import dataclass

from runs.models import ConfirmedRecipient, HookKind, NotificationHook


@dataclass(frozen=True)
class HookAddresses:
    """A hook's addresses, in the order it lists them: those that confirmed, the others."""

    confirmed: list[str]
    awaiting: list[str]


def hook_addresses(hook: NotificationHook) -> HookAddresses:
    """An e-mail hook's addresses split by their confirmation; none for other kinds."""
    if hook.kind != HookKind.EMAIL or not hook.email_to:
        return HookAddresses([], [])
    listed = hook.email_to.split(", ")
    rows = ConfirmedRecipient.objects.filter(organization_id=hook.organization_id, hook=hook)
    confirmed = set(rows.values_list("address", flat=True))
    return HookAddresses(
        [address for address in listed if address in confirmed],
        [address for address in listed if address not in confirmed],
    )
