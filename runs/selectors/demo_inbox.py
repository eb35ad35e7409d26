"""What the demo's local webhook receiver and mail sink were sent (``runs.demo.inbox``), as an
organization's notifications page shows it.

Guarantees: an organization sees only what was sent on its behalf — webhook bodies naming
its slug, mails to addresses its own e-mail hooks list — newest first, at most ``SHOWN``
of each; without a demo inbox (``BENCHSITE_DEMO_INBOX`` unset, everywhere but the demo)
there is nothing to show, and a line the reader cannot parse is skipped, never a 500.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from runs.models import HookKind, NotificationHook, Organization

WEBHOOKS_FILE = "webhooks.jsonl"
MAIL_FILE = "mail.jsonl"
SHOWN = 20


@dataclass(frozen=True)
class DemoInbox:
    """The demo receiver's requests and the mail sink's messages of one organization."""

    receiver_url: str
    webhooks: list[dict]
    mails: list[dict]


def _records(path: Path) -> list[dict]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:  # a line cut short by a crash: the rest still reads
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def demo_inbox(*, org: Organization) -> DemoInbox | None:
    """``org``'s share of the demo inbox; None outside the demo."""
    if not settings.BENCHSITE_DEMO_INBOX:
        return None
    folder = Path(settings.BENCHSITE_DEMO_INBOX)
    webhooks = [
        record
        for record in _records(folder / WEBHOOKS_FILE)
        if isinstance(record.get("body"), dict) and record["body"].get("organization") == org.slug
    ]
    hooks = NotificationHook.objects.filter(organization=org, kind=HookKind.EMAIL)
    ours = {address for hook in hooks for address in hook.email_to.split(", ") if address}
    mails = [record for record in _records(folder / MAIL_FILE) if ours & set(record.get("to", []))]
    return DemoInbox(
        receiver_url=settings.BENCHSITE_DEMO_RECEIVER_URL,
        webhooks=webhooks[::-1][:SHOWN],
        mails=mails[::-1][:SHOWN],
    )
