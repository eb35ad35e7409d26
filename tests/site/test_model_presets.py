"""One list of well-known models (agents.hardware's MODEL_PRESETS): the site registers each
with exactly the facts the simulator reasons about (issue 15)."""

from __future__ import annotations

import pytest

from agents.hardware import MODEL_PRESETS, REGISTERED_FACTS, ModelFacts

from .conftest import make_model

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("key", sorted(MODEL_PRESETS))
def test_it_registers_every_preset_with_the_facts_the_simulator_uses(alice, key):
    preset = MODEL_PRESETS[key]
    model = make_model(alice.org, **preset.registered)
    assert (model.name, model.licence) == (preset.name, preset.licence)
    stated = {name: getattr(model, name) for name in REGISTERED_FACTS}
    assert ModelFacts.from_registered(**stated).to_registered() == preset.facts.to_registered()
    assert model.kv_cache_bytes_per_token() == preset.facts.kv_bytes_per_token()
