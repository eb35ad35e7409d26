"""The live page's notices (``runs.consumers.notices``): made from what the ingest stored, a
conflict told without its content, and a channel layer that fails never raised to the
caller. The sockets that carry them are tested end to end in ``test_agent_ingest``."""

from __future__ import annotations

import uuid

from agents import protocol
from runs.consumers import notices
from runs.services.ingest import IngestOutcome

from .test_agent_ingest import RESULT, messages

RUN_ID = uuid.uuid4()


def _stored(index: int) -> IngestOutcome:
    message = protocol.parse_agent_message(messages(RUN_ID)[index])
    payload = message.model_dump(mode="json")
    return IngestOutcome(seq=message.seq, stored=True, message=message, payload=payload)


def test_it_names_a_measurement_and_carries_what_the_page_charts():
    notice = notices.run_notice(_stored(4))
    assert {key: notice[key] for key in ("kind", "epoch", "seq", "trial", "level")} == {
        "kind": "measurement",
        "epoch": 0,
        "seq": 4,
        "trial": 0,
        "level": {"concurrency": 8},  # only the level's fields that are set
    }
    # The charted figures and counts the agent sent, not the whole result (no duration).
    assert notice["result"] == {key: RESULT[key] for key in RESULT if key != "duration"}
    assert "server" not in notice


def test_it_carries_a_progress_points_figures():
    notice = notices.run_notice(_stored(3))
    assert notice["kind"] == "level_progress"
    assert (notice["requests_done"], notice["requests_total"], notice["ttft_ms_p99"]) == (
        40,
        100,
        47.0,
    )
    assert "result" not in notice


def test_it_tells_of_a_conflict_without_its_content():
    conflict = IngestOutcome(seq=4, stored=False, refused="conflict: …", conflict=True)
    assert notices.run_notice(conflict) == {"kind": "agent_conflict"}


def test_it_says_nothing_of_a_resend_or_a_refusal():
    assert notices.run_notice(IngestOutcome(seq=4, stored=False)) is None
    refused = IngestOutcome(seq=4, stored=False, refused="ended", run_ended=True)
    assert notices.run_notice(refused) is None


def test_it_keeps_quiet_when_the_channel_layer_fails(monkeypatch):
    sent = []

    class BrokenLayer:
        async def group_send(self, group, message):
            sent.append(group)
            raise ConnectionError("redis is down")

    monkeypatch.setattr(notices, "get_channel_layer", BrokenLayer)
    notices.notify_run_watchers(RUN_ID, [_stored(4)])  # no exception: the page re-reads REST
    assert sent == [notices.run_group(RUN_ID)]
