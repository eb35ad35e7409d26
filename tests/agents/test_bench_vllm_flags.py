"""``benchsite-agent bench`` runs a ``vllm bench serve`` command line (issue 35, point 8):
vLLM's common flags read as bench's own, one ``--max-concurrency`` as one closed-loop level,
the results file where ``--save-result --result-dir`` put vLLM's, and the tokenizer taken
from ``--model`` out of the local Hugging Face cache, offline.

``tests/vllm/test_bench_flags_vllm.py`` parses the same command line with vLLM's own parser
and checks that the two read it alike."""

from __future__ import annotations

import json
import shlex

import pytest

from agents.cli import main
from agents.loadgen.tokenizer import cached_model_folder
from tests.agents.fake_openai_server import FakeServer

FAKE = "fake?ttft_ms=5&itl_ms=1"  # the fake server's model name sets its timing
# A vllm bench serve command line as its users write one (after `vllm bench serve`).
VLLM_BENCH_SERVE = (
    "--backend openai-chat --endpoint /v1/chat/completions --base-url {url} "
    "--model acme/tiny-chat --served-model-name '{served}' --dataset-name random "
    "--random-input-len 24 --random-output-len 4 --num-prompts 6 --max-concurrency 3 "
    "--ignore-eos --seed 7 --save-result --result-dir {results}"
)


def vllm_bench_serve_line(url: str, results) -> list[str]:
    return shlex.split(VLLM_BENCH_SERVE.format(url=url, served=FAKE, results=results))


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """A local Hugging Face cache holding ``acme/tiny-chat``'s tokenizer (a word-level one
    built here), as ``huggingface_hub`` lays it out; nothing is downloaded."""
    tokenizers = pytest.importorskip("tokenizers")
    words = [f"w{i}" for i in range(500)]
    tokenizer = tokenizers.Tokenizer(
        tokenizers.models.WordLevel({w: i for i, w in enumerate(["<unk>", *words])}, "<unk>")
    )
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = tokenizers.decoders.WordPiece(prefix="##")
    cache = tmp_path / "hub"
    repository = cache / "models--acme--tiny-chat"
    snapshot = repository / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    tokenizer.save(str(snapshot / "tokenizer.json"))
    (repository / "refs").mkdir()
    (repository / "refs" / "main").write_text("0123abcd")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return snapshot


def test_it_runs_a_vllm_bench_serve_command_line(hub_cache, tmp_path, capsys):
    results = tmp_path / "results"  # created, as vllm bench serve does
    with FakeServer() as server:
        code = main(["bench", *vllm_bench_serve_line(server.base_url, results)])
        shown = capsys.readouterr()
        assert code == 0, shown.err
        [written] = results.iterdir()
        # vllm bench serve's file name: backend, rate, concurrency, model, time.
        assert written.name.startswith("openai-chat-infqps-concurrency3-tiny-chat-")
        document = json.loads(written.read_text())
        config = document["config"]
        assert config["levels"] == [{"concurrency": 3}]
        assert (config["endpoint"], config["model"], config["seed"]) == ("chat", FAKE, 7)
        [level] = document["levels"]
        assert level["completed"] == 6 and level["max_concurrent_requests"] <= 3
        assert level["total_output_tokens"] == 6 * 4
        # Exact prompt lengths: the cached tokenizer built them (the fake counts words).
        assert level["total_input_tokens"] == 6 * 24
    assert f"tokenizer: acme/tiny-chat's, from {hub_cache}" in shown.out


def test_it_finds_a_model_in_the_cache_or_as_a_folder_and_nothing_else(hub_cache, tmp_path):
    assert cached_model_folder("acme/tiny-chat") == hub_cache
    assert cached_model_folder(str(hub_cache)) == hub_cache
    assert cached_model_folder("acme/absent") is None
    assert cached_model_folder("../etc") is None
    assert cached_model_folder(FAKE) is None


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--backend", "tgi"], "--backend tgi: bench speaks the OpenAI API"),
        (["--backend", "openai-chat", "--endpoint", "completions"], "--endpoint says completions"),
        (["--endpoint", "/v1/embeddings"], "expected completions, chat"),
        (["--dataset-name", "sonnet"], "--dataset-name sonnet: bench reads random"),
        (["--dataset-name", "sharegpt"], "--dataset-name sharegpt: bench reads random"),
        (["--dataset-path", "x.json"], "--dataset-path goes with --dataset-name sharegpt"),
        (["--result-dir", "out"], "--result-dir and --result-filename go with --save-result"),
        (["--save-result", "--json", "a.json"], "give --json or --save-result, not both"),
    ],
)
def test_it_names_a_vllm_flag_it_cannot_read_as_given(arguments, message, capsys):
    try:
        code = main(["bench", "--port", "9", "--model", "m", "--max-concurrency", "2", *arguments])
    except SystemExit as refused:  # argparse's own refusal (of a value's type)
        code = refused.code
    assert code == 2
    assert message in capsys.readouterr().err.replace("\n", " ")
