"""Who may reach what through the REST API, endpoint by endpoint.

Every route of ``runs.api.urls`` is listed once in ``ENDPOINTS`` with the role it needs; a
route added without an entry fails ``test_it_has_an_access_case_for_every_route``. The cases:
charlie (another tenant) is answered exactly like a missing row, bob (viewer) cannot write,
mallory (member) cannot manage, a token reaches only its own organization, and bad, revoked
or orphaned credentials get 401 — always with nothing written.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import URLPattern, URLResolver, reverse
from rest_framework.test import APIClient

import runs.api.urls
from agents.hardware import MODEL_PRESETS
from runs.access import Need
from runs.models import (
    ApiToken,
    AuditEvent,
    GpuType,
    Membership,
    NotificationHook,
    Promotion,
    Run,
    Trial,
    User,
)
from runs.models import Endpoint as ExistingEndpoint  # ``Endpoint`` here is a route case
from runs.schedule_spec import schedule_spec
from runs.services.budgets import budget_set
from runs.services.catalogue import gpu_price_set
from runs.services.credentials import provider_key_set
from runs.services.evaluations import evaluation_set_upload
from runs.services.experiments import dataset_upload
from runs.services.schedules import schedule_set
from runs.services.tenancy import membership_add, token_create

from .conftest import (
    H100,
    MODEL_FIELDS,
    SYSTEM,
    WORKLOAD,
    Cast,
    Person,
    cast_create,
    experiment_payload,
    frozen,
    make_experiment,
    rows_kept_for_the_module,
)
from .conftest import make_model as make_model_spec
from .db_state import database_state

SHAREGPT = [
    {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello!"}]},
]
QWEN = MODEL_PRESETS["qwen2.5-7b"].registered


@dataclass
class World:
    """Org A with one row of every kind, and the cast around it."""

    alice: Person
    bob: Person
    mallory: Person
    charlie: Person
    model_id: uuid.UUID  # used by the experiment
    rows: dict[str, object]  # basename → the id of one of A's rows


@pytest.fixture
def endpoints_answer(monkeypatch, settings):
    """Endpoints on 127.0.0.1 are allowed and every one serves "fake" (the check itself is
    test_endpoints.py's, against a real server): adding one succeeds without a server."""
    settings.BENCHSITE_ENDPOINT_HOSTS = ["127.0.0.1"]
    settings.BENCHSITE_OUTBOUND_PRIVATE_HOSTS = ["127.0.0.1"]
    monkeypatch.setattr(
        "runs.services.endpoints._served_models", lambda base_url, api_key: (["fake"], "", "")
    )


@pytest.fixture(scope="module")
def world_once(django_db_setup, django_db_blocker, tmp_path_factory):
    """The world, built once per module and worker (``rows_kept_for_the_module``): building
    it took about 0.5 s, and the module has hundreds of cases."""
    with rows_kept_for_the_module(django_db_blocker, tmp_path_factory.mktemp("media")):
        yield _world_build(cast_create())


@pytest.fixture
def world(world_once, db, endpoints_answer, monkeypatch) -> World:
    """The module's world, as this test's own copy (a test that changes an object in memory
    changes it for itself only). Predictions run on a small simulation budget: who may ask
    is what is tested here, not the figures (the budget's own effect is test_predictions')."""
    monkeypatch.setattr("runs.selectors.predictions.WORK_BUDGET", 20_000)
    return copy.deepcopy(world_once)


def _world_build(cast: Cast) -> World:
    alice, bob, mallory, charlie = cast.alice, cast.bob, cast.mallory, cast.charlie
    org = alice.org
    model = make_model_spec(org)
    experiment = make_experiment(org, model=model)
    spare = make_model_spec(org, **QWEN)  # used by nothing, so deleting it would succeed
    # The run belongs to another experiment: one with runs cannot be deleted.
    with_run = make_experiment(org, model=model, name="with a run")
    run = Run.objects.create(organization=org, experiment=with_run, **frozen(with_run))
    dataset = dataset_upload(org=org, actor=SYSTEM, name="chats", raw=json.dumps(SHAREGPT).encode())
    evaluation_set = evaluation_set_upload(org=org, actor=SYSTEM, name="sums", raw=EVALUATION_SET)
    budget = budget_set(org=org, actor=SYSTEM, limit_usd=Decimal(50))
    token = token_create(org=org, user=alice.user, name="ci", actor=SYSTEM).token
    gpu_price_set(
        org=org,
        gpu_type=GpuType.objects.get(id=H100),
        actor=SYSTEM,
        price_secure_usd_hr=Decimal("3.00"),
        price_community_usd_hr=None,
    )
    provider_key_set(actor=SYSTEM, org=org, provider="runpod", api_key="rpa_world_" + "0" * 30)
    trial = Trial.objects.create(
        organization_id=run.organization_id, run=run, index=0, serve_config={}, outcome="succeeded"
    )
    promotion = Promotion.objects.create(
        organization=org, experiment=run.experiment, trial=trial, proposed_by=mallory.user
    )
    hook = NotificationHook.objects.create(
        organization=org,
        name="mail",
        kind="email",
        email_to="ops@acme.example",
        events=["run.failed"],
    )
    schedule_set(
        actor=SYSTEM,
        experiment=experiment,
        spec=schedule_spec(cron="0 6 * * *", thresholds="p99_ttft_ms=10%"),
    )
    endpoint = ExistingEndpoint.objects.create(
        organization=org, name="prod", base_url="http://127.0.0.1:9", served_model_name="fake"
    )
    return World(
        alice=alice,
        bob=bob,
        mallory=mallory,
        charlie=charlie,
        model_id=model.id,
        rows={
            "member": Membership.objects.get(organization=org, user=mallory.user).pk,
            "token": token.pk,
            "model": spare.pk,
            "gpu-type": H100,
            "experiment": experiment.pk,
            "dataset": dataset.pk,
            "evaluation-set": evaluation_set.pk,
            "budget": budget.pk,
            "run": run.pk,
            "provider-key": "runpod",
            "promotion": promotion.pk,
            "notification-hook": hook.pk,
            "endpoint": endpoint.pk,
        },
    )


# Ids that are well-formed but name no row, per basename.
def missing_id(basename: str):
    return {"member": 2**40, "gpu-type": "NVIDIA GeForce 256"}.get(basename, uuid.uuid4())


def upload() -> dict:
    return {
        "name": "more chats",
        "file": SimpleUploadedFile("chats.json", json.dumps(SHAREGPT).encode()),
    }


EVALUATION_SET = b'{"prompt": "2+2=", "reference": "4", "scorer": {"kind": "exact"}}\n'


def evaluation_upload() -> dict:
    return {"name": "more sums", "file": SimpleUploadedFile("sums.jsonl", EVALUATION_SET)}


@dataclass(frozen=True)
class Endpoint:
    """One route and method of the API, the role it needs, and a valid request for it."""

    name: str  # URL name in runs.api.urls
    method: str
    need: Need
    payload: Callable[[World], dict] | None = None

    @property
    def basename(self) -> str:
        return self.name.rsplit("-", 1)[0]

    @property
    def detail(self) -> bool:
        return self.name.endswith(
            (
                "-detail",
                "-price",
                "-estimate",
                "-prediction",
                "-cancel",
                "-test",
                "-deliveries",
                "-schedule",
                "-choice",
            )
        )

    @property
    def reads_only(self) -> bool:
        return self.method == "get" or self.name in ("experiment-validate", "experiment-predict")

    @property
    def tenant(self) -> bool:
        """Under /api/v1/orgs/<org>/ (the organization's own data)."""
        return self.name not in GLOBAL_ROUTES

    def __str__(self) -> str:
        return f"{self.method.upper()} {self.name}"


# Routes outside any organization: answered the same to every authenticated caller, except
# org-list and org-detail, which show only the caller's organizations.
GLOBAL_ROUTES = {"api-root", "org-list", "org-detail", "serve-flags-list"}
# Documentation, public by design (SPECTACULAR_SETTINGS["SERVE_PERMISSIONS"]): no tenant data.
PUBLIC_ROUTES = {("api-schema", "get"), ("api-docs", "get"), ("api-redoc", "get")}
# The agent's endpoints take a run token, never a user's: tested in test_agent_ingest.py,
# test_agent_epochs.py (epoch), test_run_cancel.py (datasets) and test_evaluation_jobs.py
# (evaluation sets).
AGENT_ROUTES = {
    ("agent-messages", "post"),
    ("agent-job", "get"),
    ("agent-epoch", "post"),
    ("agent-dataset", "get"),
    ("agent-evaluation-set", "get"),
}

R, W, M = Need.READ, Need.WRITE, Need.MANAGE
ENDPOINTS = [
    Endpoint("api-root", "get", R),
    Endpoint("serve-flags-list", "get", R),
    Endpoint("org-list", "get", R),
    Endpoint("org-detail", "get", R),
    Endpoint("member-list", "get", R),
    Endpoint("member-list", "post", M, lambda w: {"email": "eve@acme.example", "role": "member"}),
    Endpoint("member-detail", "get", R),
    Endpoint("member-detail", "patch", M, lambda w: {"role": "admin"}),
    Endpoint("member-detail", "delete", M),
    # Tokens are secrets' metadata: even listing them is for owners and admins.
    Endpoint("token-list", "get", M),
    Endpoint("token-list", "post", M, lambda w: {"name": "deploy"}),
    Endpoint("token-detail", "get", M),
    Endpoint("token-detail", "delete", M),
    Endpoint("model-list", "get", R),
    Endpoint(
        "model-list",
        "post",
        W,
        lambda w: MODEL_FIELDS | {"hf_repo": "mistralai/Mistral-7B-Instruct-v0.3"},
    ),
    Endpoint("model-detail", "get", R),
    Endpoint("model-detail", "put", W, lambda w: QWEN | {"notes": "replaced"}),
    Endpoint("model-detail", "patch", W, lambda w: {"notes": "patched"}),
    Endpoint("model-detail", "delete", W),
    Endpoint("gpu-type-list", "get", R),
    Endpoint("gpu-type-detail", "get", R),
    Endpoint("gpu-type-price", "put", M, lambda w: {"price_secure_usd_hr": "2.50"}),
    Endpoint("gpu-type-price", "delete", M),
    Endpoint("experiment-list", "get", R),
    Endpoint("experiment-list", "post", W, lambda w: experiment_payload(w.model_id)),
    # Validation stores nothing, so a viewer may try a draft.
    Endpoint("experiment-validate", "post", R, lambda w: experiment_payload(w.model_id)),
    Endpoint("experiment-detail", "get", R),
    Endpoint("experiment-detail", "put", W, lambda w: experiment_payload(w.model_id)),
    Endpoint("experiment-detail", "patch", W, lambda w: {"description": "patched"}),
    Endpoint("experiment-detail", "delete", W),
    Endpoint("experiment-estimate", "get", R),
    # Reports read what every member may see on the report pages.
    Endpoint("experiment-choice", "get", R),
    Endpoint("reports-models", "get", R),
    # A prediction runs the simulator and stores nothing: a viewer may ask for one.
    Endpoint("experiment-prediction", "get", R),
    Endpoint(
        "experiment-predict",
        "post",
        R,
        lambda w: experiment_payload(
            w.model_id, workload=WORKLOAD | {"concurrency": [1], "requests_per_level": 10}
        ),
    ),
    # A schedule starts runs as whoever sets it: writing; reading its history is reading.
    Endpoint("experiment-schedule", "get", R),
    Endpoint("experiment-schedule", "put", W, lambda w: {"daily_at": "06:30"}),
    Endpoint("experiment-schedule", "patch", W, lambda w: {"paused": True}),
    Endpoint("experiment-schedule", "delete", W),
    Endpoint("dataset-list", "get", R),
    Endpoint("dataset-list", "post", W, lambda w: upload()),
    Endpoint("dataset-detail", "get", R),
    Endpoint("dataset-detail", "delete", W),
    Endpoint("evaluation-set-list", "get", R),
    Endpoint("evaluation-set-list", "post", W, lambda w: evaluation_upload()),
    Endpoint("evaluation-set-detail", "get", R),
    Endpoint("evaluation-set-detail", "delete", W),
    Endpoint("budget-list", "get", R),
    Endpoint("budget-list", "post", M, lambda w: {"limit_usd": "100.00", "note": "raised"}),
    Endpoint("budget-detail", "get", R),
    Endpoint("budget-detail", "delete", M),
    Endpoint("run-list", "get", R),
    # Starting is writing (and spending): provisioning follows the commit, not run here.
    Endpoint("run-list", "post", W, lambda w: {"experiment": str(w.rows["experiment"])}),
    Endpoint("run-detail", "get", R),
    # The world's run is queued: cancelling it ends it at once (test_run_cancel.py: the rest).
    Endpoint("run-cancel", "post", W, lambda w: {"reason": "wrong grid"}),
    Endpoint("audit-list", "get", R),
    Endpoint("audit-export", "get", R),
    Endpoint("promotion-list", "get", R),
    Endpoint("promotion-detail", "get", R),
    # Provider keys are secrets: even their fingerprints are for owners and admins.
    Endpoint("provider-key-detail", "get", M),
    Endpoint("provider-key-detail", "put", M, lambda w: {"api_key": "rpa_replaced_" + "1" * 30}),
    Endpoint("provider-key-detail", "delete", M),
    # Where the organization's news goes (and the hooks' hosts): owners and admins.
    Endpoint("notification-hook-list", "get", M),
    Endpoint(
        "notification-hook-list",
        "post",
        M,
        lambda w: {
            "name": "pager",
            "kind": "email",
            "email_to": "oncall@acme.example",
            "events": ["run.failed"],
        },
    ),
    Endpoint("notification-hook-detail", "get", M),
    Endpoint("notification-hook-detail", "delete", M),
    Endpoint("notification-hook-test", "post", M),
    Endpoint("notification-hook-deliveries", "get", M),
    # Existing endpoints: everyone reads them (the builder names one); adding one stores an
    # API key, so owners and admins add, change and delete them.
    Endpoint("endpoint-list", "get", R),
    Endpoint(
        "endpoint-list",
        "post",
        M,
        lambda w: {
            "name": "staging",
            "base_url": "http://127.0.0.1:9",
            "served_model_name": "fake",
            "api_key": "sk-world-key",
        },
    ),
    Endpoint("endpoint-detail", "get", R),
    Endpoint("endpoint-detail", "patch", M, lambda w: {"api_key": "sk-rotated-key"}),
    Endpoint("endpoint-detail", "delete", M),
]
TENANT_ENDPOINTS = [e for e in ENDPOINTS if e.tenant]
ORG_DETAIL = next(e for e in ENDPOINTS if e.name == "org-detail")
TENANT_ROW_ENDPOINTS = [e for e in TENANT_ENDPOINTS if e.detail]
ids = str  # test ids read "POST model-list"


def url_of(endpoint: Endpoint, org: str, row=None) -> str:
    if endpoint.name in ("api-root", "org-list", "serve-flags-list"):
        return reverse(endpoint.name)
    if endpoint.name == "org-detail":
        return reverse(endpoint.name, kwargs={"org": org})
    kwargs = {"org": org}
    if endpoint.detail:
        # A provider key is named by its provider ("runpod"), not by a row's id.
        kwargs["provider" if endpoint.basename == "provider-key" else "pk"] = row
    return reverse(endpoint.name, kwargs=kwargs)


def a_url(endpoint: Endpoint, world: World) -> str:
    """The endpoint's URL in org A, naming A's row of its kind."""
    return url_of(endpoint, world.alice.org.slug, world.rows.get(endpoint.basename))


def call(client: APIClient, endpoint: Endpoint, url: str, world: World):
    payload = endpoint.payload(world) if endpoint.payload else None
    multipart = payload is not None and any(hasattr(v, "read") for v in payload.values())
    send = getattr(client, endpoint.method)
    if payload is None:
        return send(url)
    return send(url, payload, format="multipart" if multipart else "json")


def body(response):
    """What a caller learns from a response: its JSON, or its raw bytes."""
    if response.get("Content-Type", "").startswith("application/json") and response.content:
        return response.json()
    return b"".join(response.streaming_content) if response.streaming else response.content


# ------------------------------------------------------------------------------------------
# The route list is complete
# ------------------------------------------------------------------------------------------


def _routes(patterns) -> set[tuple[str, str]]:
    found = set()
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            found |= _routes(pattern.url_patterns)
            continue
        assert isinstance(pattern, URLPattern)
        callback = pattern.callback
        if hasattr(callback, "actions"):  # a viewset route: exactly the methods it maps
            methods = set(callback.actions) - {"head", "options"}  # DRF adds head on use
        else:
            view = callback.view_class
            methods = {m for m in ("get", "post", "put", "patch", "delete") if hasattr(view, m)}
        found |= {(pattern.name, method) for method in methods}
    return found


def test_it_has_an_access_case_for_every_route():
    routes = _routes(runs.api.urls.urlpatterns)
    listed = {(e.name, e.method) for e in ENDPOINTS} | PUBLIC_ROUTES | AGENT_ROUTES
    assert routes - listed == set(), "routes without access tests"
    assert listed - routes == set(), "access tests for routes that do not exist"
    expected = len(ENDPOINTS) + len(PUBLIC_ROUTES) + len(AGENT_ROUTES)
    assert len(listed) == expected, "an endpoint is listed twice"


# ------------------------------------------------------------------------------------------
# The owner reaches everything (so every 403/404 below is about access, not bad requests)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=ids)
def test_it_lets_the_owner_use_every_endpoint(world, endpoint):
    before = database_state()
    response = call(world.alice.client(), endpoint, a_url(endpoint, world), world)
    assert response.status_code < 300, body(response)
    if endpoint.reads_only:
        assert database_state() == before, "a read wrote something"
    else:
        assert database_state() != before, "the write changed nothing"


@pytest.mark.parametrize("name", sorted(name for name, _ in PUBLIC_ROUTES))
def test_it_serves_the_documentation_without_credentials(db, name):
    assert APIClient().get(reverse(name)).status_code == 200


# ------------------------------------------------------------------------------------------
# Other tenants: 404 exactly like a missing row
# ------------------------------------------------------------------------------------------

NO_SUCH_ORG = "no-such-org"


@pytest.mark.parametrize("endpoint", [*TENANT_ENDPOINTS, ORG_DETAIL], ids=ids)
def test_it_hides_other_tenants_organizations(world, endpoint):
    """charlie, owner of B, on A's URLs: the answer of an organization that does not exist."""
    client = world.charlie.client()
    missing = call(
        client, endpoint, url_of(endpoint, NO_SUCH_ORG, missing_id(endpoint.basename)), world
    )
    before = database_state()
    response = call(client, endpoint, a_url(endpoint, world), world)
    assert database_state() == before
    assert response.status_code == missing.status_code == 404
    assert body(response) == body(missing)
    assert body(response) == {
        "error": {"status": 404, "code": "not_found", "message": "Not found."}
    }


# GPU types are a shared catalogue: B reading H100 is not reading A's row (see below). A
# provider key is named by its provider ("runpod"), the same name in every organization: B's
# URL reaches B's own key (test_provider_keys.py: test_it_hides_other_tenants_keys).
@pytest.mark.parametrize(
    "endpoint",
    [e for e in TENANT_ROW_ENDPOINTS if e.basename not in {"gpu-type", "provider-key"}],
    ids=ids,
)
def test_it_hides_other_tenants_rows(world, endpoint):
    """charlie, in his own organization, naming one of A's rows: the answer of a missing id."""
    client = world.charlie.client()
    b = world.charlie.org.slug
    missing = call(client, endpoint, url_of(endpoint, b, missing_id(endpoint.basename)), world)
    before = database_state()
    response = call(client, endpoint, url_of(endpoint, b, world.rows[endpoint.basename]), world)
    assert database_state() == before
    assert response.status_code == missing.status_code == 404
    assert body(response) == body(missing)


@pytest.mark.parametrize(
    "name", sorted({e.name for e in TENANT_ENDPOINTS} | {"org-detail"}), ids=ids
)
@pytest.mark.parametrize("method", ["options", "head"])
def test_it_hides_other_tenants_from_options_and_head(world, name, method):
    endpoint = next(e for e in ENDPOINTS if e.name == name)
    client = world.charlie.client()
    missing = getattr(client, method)(url_of(endpoint, NO_SUCH_ORG, missing_id(endpoint.basename)))
    response = getattr(client, method)(a_url(endpoint, world))
    # OPTIONS of org-detail describes the route, the same for any slug: nothing to hide.
    assert response.status_code == missing.status_code
    assert response.status_code == 404 or (method, name) == ("options", "org-detail")
    assert response.content == missing.content


@pytest.mark.parametrize(
    "name",
    ["member-list", "token-list", "model-list", "experiment-list", "dataset-list", "budget-list"],
)
def test_it_lists_only_the_callers_rows(world, name):
    b_list = world.charlie.client().get(reverse(name, kwargs={"org": world.charlie.org.slug}))
    a_list = world.alice.client().get(reverse(name, kwargs={"org": world.alice.org.slug}))
    assert b_list.status_code == a_list.status_code == 200
    a_ids = {row["id"] for row in a_list.json()["results"]}
    assert a_ids, "A has rows of this kind"
    assert a_ids.isdisjoint(row["id"] for row in b_list.json()["results"])


def test_it_hides_other_tenants_gpu_prices_and_audit_log(world):
    b = world.charlie.org.slug
    client = world.charlie.client()
    gpu = client.get(reverse("gpu-type-detail", kwargs={"org": b, "pk": H100})).json()
    assert gpu["org_price_secure_usd_hr"] is None  # A's 3.00 is A's alone
    listed = client.get(reverse("gpu-type-list", kwargs={"org": b}), {"page_size": 200}).json()
    assert all(row["org_price_secure_usd_hr"] is None for row in listed["results"])
    log = client.get(reverse("audit-list", kwargs={"org": b}), {"page_size": 200}).json()
    a_events = AuditEvent.objects.filter(organization=world.alice.org).values_list(
        "hash", flat=True
    )
    assert {row["hash"] for row in log["results"]}.isdisjoint(a_events)
    exported = client.get(reverse("audit-export", kwargs={"org": b}), {"as": "json"})
    assert "acme" not in b"".join(exported.streaming_content).decode()


def test_it_lists_only_the_callers_organizations(world):
    listed = world.charlie.client().get(reverse("org-list")).json()
    assert [org["slug"] for org in listed["results"]] == ["globex"]


def test_it_refuses_other_tenants_models_as_a_reference(world):
    """An experiment in B naming A's model reads as naming a model that does not exist."""
    client = world.charlie.client()
    url = reverse("experiment-list", kwargs={"org": world.charlie.org.slug})
    before = database_state()
    foreign = client.post(url, experiment_payload(world.model_id), format="json")
    missing_model = uuid.uuid4()
    missing = client.post(url, experiment_payload(missing_model), format="json")
    assert database_state() == before
    assert foreign.status_code == missing.status_code == 400
    assert list(foreign.json()["error"]["fields"]) == ["model"]
    foreign_text = json.dumps(foreign.json()).replace(str(world.model_id), "<id>")
    assert foreign_text == json.dumps(missing.json()).replace(str(missing_model), "<id>")


def test_it_refuses_other_tenants_experiments_in_budgets(world):
    client = world.charlie.client()
    url = reverse("budget-list", kwargs={"org": world.charlie.org.slug})
    before = database_state()
    experiment = world.rows["experiment"]
    response = client.post(url, {"limit_usd": "5", "experiment": str(experiment)}, format="json")
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["experiment"]
    assert database_state() == before


def test_it_does_not_issue_tokens_for_other_tenants_members(world):
    client = world.charlie.client()
    url = reverse("token-list", kwargs={"org": world.charlie.org.slug})
    before = database_state()
    foreign = client.post(url, {"name": "x", "user": world.alice.user.email}, format="json")
    missing = client.post(url, {"name": "x", "user": "nobody@example.com"}, format="json")
    assert database_state() == before
    assert foreign.status_code == missing.status_code == 400
    assert foreign.json() == missing.json()


# ------------------------------------------------------------------------------------------
# Roles inside the organization
# ------------------------------------------------------------------------------------------


def _expect_role(world: World, person: Person, endpoint: Endpoint, allowed: bool):
    before = database_state()
    response = call(person.client(), endpoint, a_url(endpoint, world), world)
    if allowed:
        assert response.status_code < 300, body(response)
        return
    assert response.status_code == 403, body(response)
    error = response.json()["error"]
    assert error["status"] == 403 and error["code"] == "permission_denied"
    assert database_state() == before


@pytest.mark.parametrize("endpoint", TENANT_ENDPOINTS, ids=ids)
def test_it_lets_viewers_only_read(world, endpoint):
    _expect_role(world, world.bob, endpoint, allowed=endpoint.need is Need.READ)


@pytest.mark.parametrize("endpoint", TENANT_ENDPOINTS, ids=ids)
def test_it_keeps_management_to_owners_and_admins(world, endpoint):
    _expect_role(world, world.mallory, endpoint, allowed=endpoint.need is not Need.MANAGE)


@pytest.mark.parametrize("endpoint", TENANT_ENDPOINTS, ids=ids)
def test_it_lets_admins_manage(world, endpoint):
    Membership.objects.filter(pk=world.rows["member"]).update(role="admin")
    _expect_role(world, world.mallory, endpoint, allowed=True)


# ------------------------------------------------------------------------------------------
# Tokens are bound to one organization and die with revocation or membership
# ------------------------------------------------------------------------------------------


@pytest.fixture
def dave(world) -> Person:
    """Owner in A and member in B, holding a token issued in B."""
    user = User.objects.create_user("dave@both.example", "correct-horse-battery")
    membership_add(org=world.alice.org, user=user, role="owner", actor=SYSTEM)
    membership_add(org=world.charlie.org, user=user, role="member", actor=SYSTEM)
    raw = token_create(org=world.charlie.org, user=user, name="b-only", actor=SYSTEM).raw
    return Person(user=user, org=world.charlie.org, token=raw)


@pytest.mark.parametrize("endpoint", [*TENANT_ENDPOINTS, ORG_DETAIL], ids=ids)
def test_it_keeps_a_token_inside_its_organization(world, dave, endpoint):
    client = dave.client()
    missing = call(
        client, endpoint, url_of(endpoint, NO_SUCH_ORG, missing_id(endpoint.basename)), world
    )
    before = database_state()
    response = call(client, endpoint, a_url(endpoint, world), world)
    assert database_state() == before
    assert response.status_code == missing.status_code == 404
    assert body(response) == body(missing)


def test_it_lists_only_the_tokens_organization(world, dave):
    listed = dave.client().get(reverse("org-list")).json()
    assert [org["slug"] for org in listed["results"]] == ["globex"]
    # The same person signed in on the web sees both.
    client = APIClient()
    client.force_login(dave.user)
    listed = client.get(reverse("org-list")).json()
    assert [(org["slug"], org["role"]) for org in listed["results"]] == [
        ("acme", "owner"),
        ("globex", "member"),
    ]


def _unauthorised(response):
    assert response.status_code == 401, body(response)
    assert response.json()["error"]["status"] == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=ids)
def test_it_requires_credentials_everywhere(world, endpoint):
    before = database_state()
    _unauthorised(call(APIClient(), endpoint, a_url(endpoint, world), world))
    assert database_state() == before


@pytest.mark.parametrize(
    "header",
    [
        "Bearer",
        "Bearer ",
        "Bearer two parts",
        "Bearer bsk_not-a-real-token",
        "Bearer bsk_\u00e9t\u00e9",
        "Token {token}",
        "Basic YWxpY2VAYWNtZS5leGFtcGxlOmNvcnJlY3QtaG9yc2UtYmF0dGVyeQ==",
        "{token}",
        "Bearer {token}x",
        "Bearer {prefix}",
    ],
)
@pytest.mark.parametrize(
    "endpoint",
    [e for e in ENDPOINTS if (e.name, e.method) in {("model-list", "get"), ("model-list", "post")}],
    ids=ids,
)
def test_it_refuses_malformed_authorization(world, header, endpoint):
    token = world.alice.token
    client = APIClient()
    value = header.format(token=token, prefix=token[:12])
    client.credentials(HTTP_AUTHORIZATION=value.encode("utf-8").decode("latin-1"))
    before = database_state()
    _unauthorised(call(client, endpoint, a_url(endpoint, world), world))
    assert database_state() == before


def test_it_refuses_a_revoked_token(world):
    alice = world.alice
    url = reverse("model-list", kwargs={"org": alice.org.slug})
    assert alice.client().get(url).status_code == 200
    token = ApiToken.objects.get(prefix=alice.token[:12])
    response = alice.client().delete(
        reverse("token-detail", kwargs={"org": alice.org.slug, "pk": token.pk})
    )
    assert response.status_code == 200 and response.json()["is_active"] is False
    _unauthorised(alice.client().get(url))


def test_it_refuses_a_removed_members_token_even_after_rejoining(world):
    alice, mallory = world.alice, world.mallory
    url = reverse("model-list", kwargs={"org": alice.org.slug})
    assert mallory.client().get(url).status_code == 200
    member_url = reverse(
        "member-detail", kwargs={"org": alice.org.slug, "pk": world.rows["member"]}
    )
    assert alice.client().delete(member_url).status_code == 204
    _unauthorised(mallory.client().get(url))
    # Removal revoked the token: coming back does not bring it back to life.
    added = alice.client().post(
        reverse("member-list", kwargs={"org": alice.org.slug}),
        {"email": mallory.user.email, "role": "member"},
        format="json",
    )
    assert added.status_code == 201
    _unauthorised(mallory.client().get(url))


def test_it_refuses_a_deactivated_users_token(world):
    User.objects.filter(pk=world.bob.user.pk).update(is_active=False)
    _unauthorised(world.bob.client().get(reverse("model-list", kwargs={"org": "acme"})))


# ------------------------------------------------------------------------------------------
# Web sessions work on the API too, with the same roles and CSRF protection
# ------------------------------------------------------------------------------------------


def test_it_accepts_a_web_session(world):
    client = APIClient()
    client.force_login(world.alice.user)
    url = reverse("model-list", kwargs={"org": "acme"})
    assert client.get(url).status_code == 200
    payload = MODEL_FIELDS | {"hf_repo": "google/gemma-2-9b-it"}
    created = client.post(url, payload, format="json")
    assert created.status_code == 201, created.json()
    event = AuditEvent.objects.filter(organization=world.alice.org).order_by("-seq").first()
    assert (event.event, event.actor_label, event.actor_via) == (
        "model.create",
        world.alice.user.email,
        "web",
    )


def test_it_applies_roles_to_web_sessions(world):
    client = APIClient()
    client.force_login(world.bob.user)
    url = reverse("model-list", kwargs={"org": "acme"})
    before = database_state()
    response = client.post(url, MODEL_FIELDS | {"hf_repo": "google/gemma-2-9b-it"}, format="json")
    assert response.status_code == 403
    assert database_state() == before


def test_it_hides_other_tenants_from_web_sessions(world):
    client = APIClient()
    client.force_login(world.charlie.user)
    response = client.get(reverse("model-list", kwargs={"org": "acme"}))
    missing = client.get(reverse("model-list", kwargs={"org": NO_SUCH_ORG}))
    assert response.status_code == missing.status_code == 404
    assert response.json() == missing.json()


def test_it_requires_csrf_for_web_session_writes(world):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(world.alice.user)
    before = database_state()
    response = client.post(
        reverse("model-list", kwargs={"org": "acme"}),
        MODEL_FIELDS | {"hf_repo": "google/gemma-2-9b-it"},
        format="json",
    )
    assert response.status_code == 403
    assert "CSRF" in response.json()["error"]["message"]
    assert database_state() == before
