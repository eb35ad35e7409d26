"""``benchsite-agent run`` on its own: a results folder and a summary without any site; one
clear line and exit code 2 for a job that cannot be used."""

from __future__ import annotations

import base64
import json

from agents.cli import main
from agents.protocol import ReportTo
from agents.runner.summary import read_journal
from tests.agents.test_runner import make_job


def test_without_a_site_it_writes_a_results_folder_and_prints_a_summary(
    tmp_path, capsys, monkeypatch
):
    job = make_job([{"max_num_seqs": 8}, {"gpu_memory_utilization": 0.03}], speed=20)
    job_path = tmp_path / "job.json"
    job_path.write_text(job.model_dump_json())
    monkeypatch.delenv("BENCHSITE_TOKEN", raising=False)
    code = main(["run", "--job", str(job_path), "--workdir", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Run summary — SIMULATED" in out
    assert "oom_at_startup" in out  # the failed trial has its row
    assert "1 trials succeeded, 1 failed, 0 skipped" in out
    journal = read_journal(tmp_path / "out" / "messages.jsonl")
    assert [m["seq"] for m in journal] == list(range(len(journal)))
    assert journal[0]["type"] == "hello" and journal[-1]["type"] == "run_finished"
    assert len([m for m in journal if m["type"] == "measurement"]) == 2
    assert (tmp_path / "out" / "trial-0" / "sim.log").exists()  # the engine's log is kept


def test_the_job_can_come_from_the_environment(tmp_path, capsys, monkeypatch):
    job = make_job([{"max_num_seqs": 4}], concurrency=(1,), requests=2, speed=20)
    monkeypatch.setenv("BENCHSITE_JOB", base64.b64encode(job.model_dump_json().encode()).decode())
    assert main(["run", "--workdir", str(tmp_path)]) == 0
    assert str(job.run_id) in (tmp_path / "messages.jsonl").read_text()


def test_a_bad_job_is_one_line_naming_the_field_and_exit_2(tmp_path, capsys, monkeypatch):
    data = json.loads(make_job([{"max_num_seqs": 4}]).model_dump_json())
    data["workload"]["concurrency"] = [0]
    path = tmp_path / "job.json"
    path.write_text(json.dumps(data))
    assert main(["run", "--job", str(path), "--workdir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert "workload.concurrency[0]" in err and "Traceback" not in err
    monkeypatch.setenv("BENCHSITE_JOB", "not base64!")
    assert main(["run"]) == 2
    assert "BENCHSITE_JOB: not base64" in capsys.readouterr().err
    monkeypatch.delenv("BENCHSITE_JOB")
    assert main(["run"]) == 2
    assert "no job" in capsys.readouterr().err


def test_a_site_without_a_run_token_is_refused_before_anything_starts(
    tmp_path, capsys, monkeypatch
):
    job = make_job([{"max_num_seqs": 4}])
    job = job.model_copy(update={"report": ReportTo(ws_url="ws://127.0.0.1:9/ws/")})
    path = tmp_path / "job.json"
    path.write_text(job.model_dump_json())
    monkeypatch.delenv("BENCHSITE_TOKEN", raising=False)
    assert main(["run", "--job", str(path), "--workdir", str(tmp_path / "w")]) == 2
    assert "BENCHSITE_TOKEN" in capsys.readouterr().err
    assert not (tmp_path / "w" / "trial-0").exists()


def test_a_site_without_a_rest_url_is_refused_before_anything_starts(tmp_path, capsys, monkeypatch):
    job = make_job([{"max_num_seqs": 4}])
    job = job.model_copy(update={"report": ReportTo(ws_url="ws://127.0.0.1:9/ws/")})
    path = tmp_path / "job.json"
    path.write_text(job.model_dump_json())
    monkeypatch.setenv("BENCHSITE_TOKEN", "bsr_" + "x" * 40)
    assert main(["run", "--job", str(path), "--workdir", str(tmp_path / "w")]) == 2
    assert "report.rest_url" in capsys.readouterr().err  # where its epoch comes from
    assert not (tmp_path / "w" / "trial-0").exists()
