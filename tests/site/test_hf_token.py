"""The organization's Hugging Face token: set and removed through the API and the settings
page (audited ``hf_token.set``/``hf_token.remove``, never shown back), and handed to a real
vLLM run's pod as a secret environment value — never in its job."""

from __future__ import annotations

import base64
import json

import pytest
from django.urls import reverse

from runs.models import AuditEvent, CredentialProvider, ProviderCredential
from runs.services import provisioning
from runs.services.credentials import provider_key_for_run, provider_key_set
from runs.services.run_start import run_start

from .conftest import SYSTEM, make_experiment, make_model, signed_in
from .test_run_as_started import RecordingProvider

pytestmark = pytest.mark.django_db

TOKEN = "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"
HF = CredentialProvider.HUGGINGFACE


def url(org: str = "acme") -> str:
    return reverse("provider-key-detail", kwargs={"org": org, "provider": "huggingface"})


def last_event(org) -> AuditEvent:
    return AuditEvent.objects.filter(organization=org).order_by("-seq").first()


def test_it_sets_and_removes_the_token_through_the_api_audited_by_fingerprint(alice):
    client = alice.client()
    response = client.put(url(), {"api_key": TOKEN}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["fingerprint"] == "…6789" and TOKEN not in response.content.decode()
    assert client.get(url()).json()["provider"] == "huggingface"
    assert provider_key_for_run(alice.org, HF) == TOKEN
    event = last_event(alice.org)
    assert (event.event, event.after) == (
        "hf_token.set",
        {"provider": "huggingface", "fingerprint": "…6789"},
    )
    assert client.delete(url()).status_code == 204
    assert provider_key_for_run(alice.org, HF) is None
    assert last_event(alice.org).event == "hf_token.remove"
    rows = json.dumps(list(AuditEvent.objects.filter(organization=alice.org).values()), default=str)
    assert TOKEN not in rows


@pytest.mark.parametrize("bad", ['hf_abc"def1234567890', "hf_abc$(reboot)12345", "hf abc"])
def test_it_refuses_a_token_that_could_break_out_of_the_pods_env_and_keeps_the_old(alice, bad):
    provider_key_set(actor=SYSTEM, org=alice.org, provider=HF, api_key=TOKEN)
    response = alice.client().put(url(), {"api_key": bad}, format="json")
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["api_key"]
    assert bad not in response.content.decode()
    assert provider_key_for_run(alice.org, HF) == TOKEN


def test_only_owners_and_admins_reach_it_and_other_tenants_see_nothing(alice, bob, charlie):
    provider_key_set(actor=SYSTEM, org=alice.org, provider=HF, api_key=TOKEN)
    assert bob.client().get(url()).status_code == 403
    assert charlie.client().get(url()).status_code == 404
    assert charlie.client().put(url(), {"api_key": TOKEN}, format="json").status_code == 404


def test_the_settings_page_sets_and_removes_it(alice):
    client = signed_in(alice)
    page = "/o/acme/settings/hf-token/"
    assert b"No token is set" in client.get(page).content
    response = client.post(page, {"api_key": TOKEN}, follow=True)
    assert b"Saved the Hugging Face token \xe2\x80\xa66789" in response.content
    assert TOKEN.encode() not in response.content
    assert ProviderCredential.objects.get(organization=alice.org, provider=HF)
    refused = client.post(page, {"api_key": "hf_'quoted'token"})
    assert b"letters, digits" in refused.content and b"quoted" not in refused.content
    client.post(page + "remove/")
    assert b"No token is set" in client.get(page).content
    assert last_event(alice.org).event == "hf_token.remove"


def test_a_real_vllm_pod_gets_the_token_in_its_env_and_never_in_its_job(alice, monkeypatch):
    provider_key_set(actor=SYSTEM, org=alice.org, provider=HF, api_key=TOKEN)
    recorder = RecordingProvider()
    monkeypatch.setattr(provisioning, "provider_for", lambda *, org, name: recorder)
    model = make_model(alice.org)
    plain = run_start(actor=SYSTEM, experiment=make_experiment(alice.org, model=model))
    provisioning.run_provision(run_id=plain.id, owner="w")
    on_volume = run_start(
        actor=SYSTEM,
        experiment=make_experiment(alice.org, model=model, name="v", network_volume_id="vol12345"),
    )
    provisioning.run_provision(run_id=on_volume.id, owner="w")
    simulated = run_start(
        actor=SYSTEM, experiment=make_experiment(alice.org, model=model, name="s", engine="sim")
    )
    provisioning.run_provision(run_id=simulated.id, owner="w")

    plain_spec, volume_spec, sim_spec = recorder.specs
    assert plain_spec.env["HF_TOKEN"] == TOKEN and "BENCHSITE_WEIGHTS_DIR" not in plain_spec.env
    assert volume_spec.env["BENCHSITE_WEIGHTS_DIR"] == "/workspace/benchsite/weights"
    assert "HF_TOKEN" not in sim_spec.env  # the simulator downloads nothing
    for spec in recorder.specs:
        assert TOKEN not in base64.b64decode(spec.env["BENCHSITE_JOB"]).decode()
        assert TOKEN not in repr(spec)
