"""``runs.services.run_lifecycle`` promises one table of a run's state changes and one module
that writes ``Run.state``; ``runs.task_queue`` that a task is sent only after the commit.

The scan reads the site's source: outside the lifecycle module (and the migrations, which
describe the schema), no code assigns a ``state`` attribute, ``setattr``s one, or passes
``state`` to an update or create of runs (a ``Run.objects…`` chain, a ``….runs`` manager or
``Run(...)``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import transaction
from kombu.exceptions import OperationalError

from runs.models import Run
from runs.models.runs import TERMINAL_RUN_STATES, RunState
from runs.services.run_lifecycle import (
    RUN_TRANSITIONS,
    IllegalRunTransition,
    run_fail,
    run_transition,
    runs_transition,
)
from runs.task_queue import enqueue_after_commit

from .conftest import frozen, make_experiment

ROOT = Path(__file__).resolve().parents[2]
LIFECYCLE = "runs/services/run_lifecycle.py"
WRITING_CALLS = {"update", "create", "get_or_create", "update_or_create", "bulk_update"}


def _names_state(node: ast.expr) -> bool:
    """Whether an assignment target is (or unpacks into) an attribute ``state``."""
    if isinstance(node, ast.Attribute):
        return node.attr == "state"
    if isinstance(node, ast.Tuple | ast.List):
        return any(_names_state(element) for element in node.elts)
    return isinstance(node, ast.Starred) and _names_state(node.value)


def _of_runs(call: ast.Call) -> bool:
    """Whether a call's chain starts at ``Run`` or goes through a ``runs`` manager."""
    link = call.func
    while isinstance(link, ast.Attribute | ast.Call):
        if isinstance(link, ast.Attribute) and link.attr == "runs":
            return True
        link = link.value if isinstance(link, ast.Attribute) else link.func
    return isinstance(link, ast.Name) and link.id == "Run"


def _is_state(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value == "state"


def _passes_state(call: ast.Call) -> bool:
    """``state=…``, ``**{"state": …}``, ``defaults={"state": …}`` or ``["state", …]``."""
    dicts = [k.value for k in call.keywords if k.arg in (None, "defaults")]
    lists = [arg for arg in call.args if isinstance(arg, ast.List | ast.Tuple)]
    return (
        any(keyword.arg == "state" for keyword in call.keywords)
        or any(isinstance(d, ast.Dict) and any(map(_is_state, d.keys)) for d in dicts)
        or any(any(map(_is_state, names.elts)) for names in lists)
    )


def _writes_state(node: ast.AST) -> bool:
    if isinstance(node, ast.Assign):
        return any(_names_state(target) for target in node.targets)
    if isinstance(node, ast.AugAssign | ast.AnnAssign):
        return _names_state(node.target)
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name) and func.id == "setattr":
        return len(node.args) > 1 and _is_state(node.args[1])
    if isinstance(func, ast.Name) and func.id == "Run":
        return _passes_state(node)
    return (
        isinstance(func, ast.Attribute)
        and func.attr in WRITING_CALLS
        and _of_runs(node)
        and _passes_state(node)
    )


def state_writes_in(source: str, where: str) -> Iterator[str]:
    """``where:line`` of every write of a run's state in ``source``."""
    for node in ast.walk(ast.parse(source)):
        if _writes_state(node):
            yield f"{where}:{node.lineno}"


def site_state_writes() -> Iterator[str]:
    for path in sorted(ROOT.glob("*/**/*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.split("/")[0] not in ("runs", "frontend", "benchsite"):
            continue
        if relative == LIFECYCLE or relative.startswith("runs/migrations/"):
            continue
        yield from state_writes_in(path.read_text(), relative)


def test_it_writes_a_runs_state_only_in_the_lifecycle_module():
    assert list(site_state_writes()) == []


def test_the_scan_sees_every_kind_of_state_write_and_nothing_else():
    # Guard against a scan that finds nothing (the test above would then be void).
    source = (
        "def moves(run, org, x):\n"
        "    run.state = 'failed'\n"  # 2
        "    run.state, run.finished_at = 'failed', x\n"  # 3
        "    setattr(run, 'state', 'failed')\n"  # 4
        "    Run.objects.filter(pk=1).update(state='failed')\n"  # 5
        "    Run.objects.filter(pk=1).update(**{'state': 'failed'})\n"  # 6
        "    org.runs.filter(pk=1).update(state='failed')\n"  # 7
        "    Run.objects.create(organization=org, state='succeeded')\n"  # 8
        "    Run(organization=org, state='succeeded')\n"  # 9
        "    Run.objects.bulk_update([run], ['state'])\n"  # 10
        "def reads_and_other_rows(run, x):\n"
        "    Run.objects.filter(state='queued').update(pod_id='')\n"
        "    Promotion.objects.filter(pk=1).update(state='approved')\n"
        "    x = run.state == 'queued'\n"
        "    return run_fail(run_id=1, reason='', state='failed')\n"
    )
    found = [int(where.split(":")[1]) for where in state_writes_in(source, "probe")]
    assert sorted(found) == list(range(2, 11))


def test_the_table_names_every_state_and_no_ended_run_moves():
    assert set(RUN_TRANSITIONS) == set(RunState)
    assert all(RUN_TRANSITIONS[state] == frozenset() for state in TERMINAL_RUN_STATES)
    # Forward only, but for a new pod: a run never goes back to queued nor to starting from
    # later steps.
    assert all(RunState.QUEUED not in later for later in RUN_TRANSITIONS.values())
    assert RunState.STARTING not in RUN_TRANSITIONS[RunState.BENCHMARKING]
    assert RunState.PROVISIONING in RUN_TRANSITIONS[RunState.FINALIZING]


@pytest.fixture
def experiment(alice):
    return make_experiment(alice.org, engine="sim", engine_image_tag="")


def _run(experiment, state: RunState) -> Run:
    run = Run.objects.create(
        organization=experiment.organization, experiment=experiment, **frozen(experiment)
    )
    Run.objects.filter(pk=run.pk).update(state=state)
    run.refresh_from_db()
    return run


@pytest.mark.django_db
def test_an_illegal_change_raises_and_changes_nothing(experiment):
    run = _run(experiment, RunState.SUCCEEDED)
    with pytest.raises(IllegalRunTransition, match="from succeeded to benchmarking"):
        run_transition(run, RunState.BENCHMARKING)
    assert run.state == RunState.SUCCEEDED
    run.refresh_from_db()
    assert run.state == RunState.SUCCEEDED
    running = _run(experiment, RunState.BENCHMARKING)
    with pytest.raises(IllegalRunTransition):
        run_transition(running, RunState.STARTING)
    run_transition(running, RunState.FINALIZING)
    assert running.state == RunState.FINALIZING


@pytest.mark.django_db
def test_a_conditional_change_moves_only_the_rows_the_table_allows(experiment):
    queued, ended = _run(experiment, RunState.QUEUED), _run(experiment, RunState.CANCELLED)
    rows = Run.objects.filter(pk__in=[queued.pk, ended.pk])
    assert runs_transition(rows, to=RunState.PROVISIONING, lease_owner="w:1") == 1
    assert dict(rows.values_list("pk", "state")) == {
        queued.pk: RunState.PROVISIONING,
        ended.pk: RunState.CANCELLED,
    }
    assert Run.objects.get(pk=ended.pk).lease_owner == ""


@pytest.mark.django_db
def test_run_fail_ends_only_an_active_run_and_only_in_an_end(experiment):
    ended = _run(experiment, RunState.SUCCEEDED)
    assert not run_fail(run_id=ended.id, reason="late")
    ended.refresh_from_db()
    assert (ended.state, ended.failure_reason) == (RunState.SUCCEEDED, "")
    active = _run(experiment, RunState.BENCHMARKING)
    with pytest.raises(IllegalRunTransition):
        run_fail(run_id=active.id, reason="x", state=RunState.STARTING)
    assert run_fail(run_id=active.id, reason="The pod stopped.")
    active.refresh_from_db()
    assert (active.state, active.failure_reason) == (RunState.FAILED, "The pod stopped.")


@pytest.mark.django_db
def test_a_task_is_sent_after_the_commit_and_never_for_a_rollback(
    monkeypatch, django_capture_on_commit_callbacks
):
    sent = []
    monkeypatch.setattr("runs.tasks.run_finalize.delay", lambda *args: sent.append(args))
    with django_capture_on_commit_callbacks(execute=True):
        with pytest.raises(RuntimeError), transaction.atomic():
            enqueue_after_commit("runs.tasks.run_finalize", "rolled-back")
            raise RuntimeError
        enqueue_after_commit("runs.tasks.run_finalize", "kept")
        assert sent == []  # not before the commit
    assert sent == [("kept",)]


@pytest.mark.django_db
def test_an_unknown_task_name_fails_at_once_and_a_broker_error_is_logged(
    monkeypatch, django_capture_on_commit_callbacks, caplog
):
    with pytest.raises(KeyError):
        enqueue_after_commit("runs.tasks.no_such_task", "x")

    def broker_down(*args):
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379")

    monkeypatch.setattr("runs.tasks.run_finalize.delay", broker_down)
    with django_capture_on_commit_callbacks(execute=True):
        enqueue_after_commit("runs.tasks.run_finalize", "x")
    assert "could not enqueue runs.tasks.run_finalize" in caplog.text
