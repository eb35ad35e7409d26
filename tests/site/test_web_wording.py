"""The words a newcomer met on the pages that read as code or slips (issue 35, point 4):
each is said plainly now."""

from __future__ import annotations

import pytest

from runs.selectors.run_levels import config_label, image_config_labels

from .conftest import make_experiment, make_model, signed_in
from .test_web_runs import text_of

pytestmark = pytest.mark.django_db


def test_it_names_a_flag_left_at_vllms_default_in_words():
    configs = [{"max_num_seqs": 64}, {}]
    assert [config_label(c, ["max_num_seqs"]) for c in configs] == [
        "max_num_seqs=64",
        "max_num_seqs at vLLM's default",
    ]

    class Planned:
        def __init__(self, config):
            self.serve_config, self.image_tag = config, ""

    assert "(default)" not in " ".join(image_config_labels([Planned(c) for c in configs]))


def test_its_settings_and_overview_read_as_sentences(alice):
    client = signed_in(alice)
    notifications = text_of(client.get("/o/acme/settings/notifications/").content.decode())
    assert "Delivery log" in notifications and "(the last 0)" not in notifications
    overview = text_of(client.get("/o/acme/").content.decode())
    assert "your role: owner" in overview
    make_experiment(alice.org, model=make_model(alice.org))
    builder = client.get("/o/acme/experiments/new/").content.decode()
    assert "replay a " not in builder  # "a Azure": the trace's name follows a colon now
