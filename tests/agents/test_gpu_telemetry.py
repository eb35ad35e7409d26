"""GPU telemetry (issue 20): the agent reads each GPU through the real NVML binding
(``nvidia-ml-py``) from a stand-in NVML library built for the tests; a host without NVML or
without a driver reports none, without error; a level's samples become each GPU's mean and
max; a run's measurements and live progress carry them, and so does ``bench
--gpu-telemetry``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from agents import protocol
from agents.cli import main
from agents.runner.hostfacts import host_facts
from agents.telemetry import GpuSampler, open_gpus
from tests.agents.fake_openai_server import FakeServer
from tests.fakes import nvml
from tests.fakes.nvml import FakeGpu, write_gpus

from .test_runner import make_job, run

H100 = FakeGpu(utilization_pct=57, memory_used_mib=61234, power_mw=312_500, temperature_c=61)
NO_POWER = FakeGpu(utilization_pct=12, memory_used_mib=100, power_mw=-1, sm_clock_mhz=1410)


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    library = nvml.build(tmp_path_factory.mktemp("nvml"))
    nvml.preload(library)
    return library


@pytest.fixture
def gpus_file(stand_in, tmp_path, monkeypatch):
    path = tmp_path / "gpus.txt"
    write_gpus(path, [H100, NO_POWER])
    monkeypatch.setenv(nvml.ENV, str(path))
    return path


@pytest.mark.slow
def test_a_host_without_nvml_or_without_a_driver_reports_no_gpus(stand_in, monkeypatch):
    # No library at all (a fresh process that never loaded the stand-in).
    code = "from agents.telemetry import open_gpus; print(open_gpus())"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (shown.returncode, shown.stdout, shown.stderr) == (0, "None\n", "")
    # The library, but no driver behind it.
    monkeypatch.delenv(nvml.ENV, raising=False)
    assert open_gpus() is None


def test_each_gpu_is_read_in_the_protocols_units(gpus_file):
    gpus = open_gpus()
    try:
        assert gpus.names == [H100.name, NO_POWER.name]
        first, second = gpus.sample()
    finally:
        gpus.close()
    assert first == protocol.GpuReading(
        index=0,
        utilization_pct=57.0,
        memory_used_mib=61234.0,
        memory_total_mib=81559.0,
        power_w=312.5,
        sm_clock_mhz=1980.0,
        temperature_c=61.0,
    )
    # A reading the board does not give is None; the others stand.
    assert second.power_w is None and second.sm_clock_mhz == 1410.0 and second.index == 1


def test_a_levels_samples_become_each_gpus_mean_and_max(gpus_file):
    seen: list[list[protocol.GpuReading]] = []

    def changed(readings):
        seen.append(readings)
        busier = FakeGpu(utilization_pct=57 + 10 * len(seen), memory_used_mib=61234 + len(seen))
        write_gpus(gpus_file, [busier, NO_POWER])

    async def level():
        sampler = GpuSampler(gpus, period=0.02, on_sample=changed)
        sampler.start()
        await asyncio.sleep(0.2)
        return await sampler.finish()

    gpus = open_gpus()
    try:
        first, second = asyncio.run(level())
    finally:
        gpus.close()
    assert len(seen) >= 3 and first.samples == second.samples == len(seen)
    utilization = [readings[0].utilization_pct for readings in seen]
    assert utilization[0] == 57.0  # the first sample is taken as the level starts
    assert first.utilization_pct.mean == pytest.approx(sum(utilization) / len(utilization))
    assert first.utilization_pct.max == max(utilization)
    assert (first.name, first.memory_total_mib) == (H100.name, 81559.0)
    assert second.power_w is None and second.sm_clock_mhz == protocol.MeanMax(
        mean=1410.0, max=1410.0
    )


@pytest.mark.slow
def test_a_runs_measurements_and_progress_carry_the_gpus(gpus_file, tmp_path):
    job = make_job([{"max_num_seqs": 8}], concurrency=(2,), output_len=64, speed=1)
    summary, recorder, _ = run(
        job, tmp_path, gpu_telemetry=True, gpu_period=0.05, progress_every=0.05
    )
    assert summary.outcome == "succeeded"
    (measurement,) = recorder.of("measurement")
    first, second = measurement["gpus"]
    assert first["name"] == H100.name and first["samples"] >= 2
    assert first["utilization_pct"] == {"mean": 57.0, "max": 57.0}
    assert first["power_w"] == {"mean": 312.5, "max": 312.5}
    assert "power_w" not in second or second["power_w"] is None
    live = [m["gpus"] for m in recorder.of("level_progress") if m.get("gpus")]
    assert live and live[-1][0]["utilization_pct"] == 57.0
    for seq, message in enumerate(recorder.messages):
        protocol.parse_agent_message({**message, "seq": seq})


@pytest.mark.slow
def test_a_simulated_engine_reports_no_gpus_of_this_host(gpus_file, tmp_path):
    job = make_job([{"max_num_seqs": 8}], concurrency=(2,), speed=20)
    summary, recorder, _ = run(job, tmp_path)
    assert summary.outcome == "succeeded"
    assert all(m.get("gpus") is None for m in recorder.of("measurement"))
    assert all(m.get("gpus") is None for m in recorder.of("level_progress"))


@pytest.mark.slow
def test_bench_reports_this_hosts_gpus_when_asked(gpus_file, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out.json"
    with FakeServer() as server:
        argv = ["bench", "--base-url", server.base_url, "--model", "fake?ttft_ms=5&itl_ms=5",
                "--concurrency", "2", "--num-prompts", "8", "--output-len", "16",
                "--gpu-telemetry", "--json", str(out)]  # fmt: skip  # flag, value
        assert main(argv) == 0
        (level,) = json.loads(out.read_text())["levels"]
        first, second = level["gpus"]
        assert first["utilization_pct"] == {"mean": 57.0, "max": 57.0} and first["samples"] >= 1
        assert second["power_w"] is None
        shown = capsys.readouterr().out
        assert "GPU 0 NVIDIA H100 80GB HBM3: utilization 57 / 57 %" in shown
        assert "power —," in shown  # the second board reports none
        # No driver: measured without, and said so.
        monkeypatch.delenv(nvml.ENV)
        assert main(argv) == 0
        assert "gpus" not in json.loads(out.read_text())["levels"][0]
        assert "NVML finds no GPU" in capsys.readouterr().err


def test_the_hello_reports_the_hosts_gpus_driver_and_cuda_from_nvml(gpus_file, monkeypatch):
    facts = host_facts()
    assert [(gpu.name, gpu.memory_mib) for gpu in facts.gpus] == [
        (H100.name, 81559),
        (NO_POWER.name, 81559),
    ]
    assert (facts.driver_version, facts.cuda_version) == ("550.54.15", "12.4")
    # Without a driver: no GPU, no driver, no CUDA, and no error.
    monkeypatch.delenv(nvml.ENV)
    facts = host_facts()
    assert (facts.gpus, facts.driver_version, facts.cuda_version) == ([], None, None)
