"""The weights of a job, fetched once from a (fake) Hugging Face hub by the real
``huggingface_hub`` client: what is fetched, what is refused, what a warm cache saves."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agents.protocol import ModelSource
from agents.weights import WeightsError, vllm_files, weights_fetch
from tests.fakes.hf_hub import FakeHub

TOKEN = "hf_tEsTtOkEnThAtMuStNeVeRbEsHoWn"


def model_source(repo: str, revision: str = "main") -> ModelSource:
    return ModelSource(
        hf_repo=repo,
        revision=revision,
        served_model_name=repo,
        parameter_count=1000,
        num_layers=2,
        hidden_size=128,
        num_attention_heads=4,
        num_kv_heads=2,
        head_dim=32,
        dtype="bfloat16",
        max_context=512,
    )


def repo_folder(root: Path) -> Path:
    """A repository as the hub holds Llama checkpoints: safetensors shards with an index,
    the same weights again as a .bin, the original .pth under ``original/``, a README."""
    folder = root / "repo"
    (folder / "original").mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "tokenizer_config.json").write_text('{"bos_token": "<s>"}')
    (folder / "tokenizer.model").write_bytes(b"spm" * 10)
    (folder / "model.safetensors.index.json").write_text("{}")
    (folder / "model-00001-of-00002.safetensors").write_bytes(os.urandom(60_000))
    (folder / "model-00002-of-00002.safetensors").write_bytes(os.urandom(40_000))
    (folder / "pytorch_model.bin").write_bytes(os.urandom(100_000))
    (folder / "original" / "consolidated.00.pth").write_bytes(os.urandom(100_000))
    (folder / "README.md").write_text("# a model")
    return folder


VLLM_FILES = [
    "config.json",
    "model-00001-of-00002.safetensors",
    "model-00002-of-00002.safetensors",
    "model.safetensors.index.json",
    "tokenizer.model",
    "tokenizer_config.json",
]


@pytest.fixture
def hub(tmp_path):
    hub = FakeHub().start()
    folder = repo_folder(tmp_path)
    hub.add_folder("org/open", folder)
    hub.add_folder("org/gated", folder, gated_token=TOKEN)
    yield hub
    hub.stop()


def fetch(hub: FakeHub, cache: Path, repo="org/open", *, token=None, **options):
    return weights_fetch(
        model_source(repo, options.pop("revision", "main")),
        cache_dir=cache,
        token=token,
        endpoint=hub.url,
        **options,
    )


def test_it_picks_what_vllm_loads_and_one_weight_format():
    names = ["pytorch_model.bin", "a.safetensors", "config.json", "original/x.pth", "README.md"]
    assert vllm_files(names) == ["a.safetensors", "config.json"]
    assert vllm_files(["pytorch_model.bin", "config.json", "x.pth"]) == [
        "config.json",
        "pytorch_model.bin",
    ]
    assert vllm_files(["consolidated.pth", "merges.txt", "vocab.json"]) == [
        "consolidated.pth",
        "merges.txt",
        "vocab.json",
    ]


def test_it_downloads_once_and_a_warm_cache_fetches_no_file(hub, tmp_path):
    cache = tmp_path / "cache"
    weights = fetch(hub, cache)
    assert sorted(p.name for p in weights.path.iterdir()) == VLLM_FILES
    assert sorted(r.path.rsplit("/", 1)[1] for r in hub.file_requests()) == VLLM_FILES
    assert weights.bytes_downloaded == weights.bytes_total == hub.bytes_served
    assert weights.bytes_downloaded > 100_000 and weights.commit == hub.repos["org/open"].sha
    detail = weights.detail()
    assert detail["bytes"] == weights.bytes_downloaded and detail["cached"] is False
    assert detail["mb_per_s"] > 0
    # vLLM resolves `--revision main` offline through the ref the download wrote.
    ref = cache / "models--org--open" / "refs" / "main"
    assert ref.read_text() == weights.commit

    served = hub.bytes_served
    again = fetch(hub, cache)
    assert again.path == weights.path and again.bytes_downloaded == 0
    assert again.detail()["cached"] is True and again.detail()["mb_per_s"] is None
    assert hub.bytes_served == served
    assert len(hub.file_requests()) == len(VLLM_FILES)


def test_a_gated_repository_needs_the_right_token(hub, tmp_path):
    for token in (None, "hf_wrongwrongwrongwrong"):
        with pytest.raises(WeightsError) as refused:
            fetch(hub, tmp_path / "cache", "org/gated", token=token)
        assert refused.value.failure_class == "model_access_denied"
        assert "org/gated is gated" in str(refused.value)
        assert (token or TOKEN) not in str(refused.value)
    assert hub.bytes_served == 0
    weights = fetch(hub, tmp_path / "cache", "org/gated", token=TOKEN)
    assert weights.bytes_downloaded > 0
    assert all(r.with_token for r in hub.file_requests("org/gated"))


def test_unknown_repositories_and_revisions_say_what_is_wrong(hub, tmp_path):
    with pytest.raises(WeightsError) as private:
        fetch(hub, tmp_path / "cache", "org/private")
    assert private.value.failure_class == "model_access_denied"
    assert "org/private is private or does not exist" in str(private.value)
    with pytest.raises(WeightsError) as revision:
        fetch(hub, tmp_path / "cache", revision="v9")
    assert revision.value.failure_class == "model_not_found"
    assert "org/open: the revision v9 does not exist" in str(revision.value)


def test_too_little_disk_is_refused_with_the_numbers_before_downloading(hub, tmp_path):
    with pytest.raises(WeightsError) as refused:
        fetch(hub, tmp_path / "cache", free_bytes=lambda path: 150_000, disk_reserve_bytes=100_000)
    assert refused.value.failure_class == "disk_too_small"
    message = str(refused.value)
    assert "needs 100.1 KB more" in message and "100.0 KB kept free" in message
    assert "150.0 KB free" in message
    assert hub.bytes_served == 0 and hub.file_requests() == []


def test_offline_it_serves_the_cached_snapshot_or_says_it_is_missing(hub, tmp_path):
    cache = tmp_path / "cache"
    online = fetch(hub, cache)
    asked = len(hub.requests)
    offline = weights_fetch(model_source("org/open"), cache_dir=cache, token=None, offline=True)
    assert offline.path == online.path and offline.bytes_downloaded == 0
    assert len(hub.requests) == asked
    with pytest.raises(WeightsError) as missing:
        weights_fetch(model_source("org/other"), cache_dir=cache, token=None, offline=True)
    assert missing.value.failure_class == "model_not_found"
    assert "hub is offline" in str(missing.value)


def test_a_hub_that_cannot_be_reached_is_an_error_naming_the_repository(tmp_path):
    with pytest.raises(WeightsError) as unreachable:
        weights_fetch(
            model_source("org/open"),
            cache_dir=tmp_path,
            token=None,
            endpoint="http://127.0.0.1:9",
        )
    assert unreachable.value.failure_class == "other"
    assert "org/open" in str(unreachable.value)


# --- the model's own code (trust_remote_code) ------------------------------------------------


@pytest.fixture
def code_hub(tmp_path):
    """A repository that needs its own code, as Kimi's do: modelling and tokenizer modules
    named by ``auto_map``, and a tiktoken tokenizer file that code loads."""
    hub = FakeHub().start()
    folder = repo_folder(tmp_path)
    (folder / "configuration_kimi.py").write_text("class KimiConfig: ...\n")
    (folder / "modeling_kimi.py").write_text("class KimiForCausalLM: ...\n")
    (folder / "tokenization_kimi.py").write_text("class TikTokenTokenizer: ...\n")
    (folder / "tiktoken.model").write_bytes(b"tiktoken ranks")
    (folder / "original" / "helper.py").write_text("# not at the top: not loaded\n")
    repo = hub.add_folder("org/kimi", folder)
    yield hub, repo
    hub.stop()


CODE_FILES = ["configuration_kimi.py", "modeling_kimi.py", "tiktoken.model", "tokenization_kimi.py"]


def test_with_trust_remote_code_it_fetches_the_code_files_at_the_pinned_revision(
    code_hub, tmp_path
):
    hub, repo = code_hub
    model = model_source("org/kimi", revision=repo.sha).model_copy(
        update={"trust_remote_code": True}
    )
    weights = weights_fetch(model, cache_dir=tmp_path / "cache", token=None, endpoint=hub.url)
    assert weights.commit == repo.sha
    assert weights.path.name == repo.sha  # the snapshot of that commit
    for name in CODE_FILES:
        assert (weights.path / name).read_bytes() == repo.files[name]
    assert weights.files == len(VLLM_FILES) + len(CODE_FILES)
    fetched = {request.path.rsplit("/", 1)[-1] for request in hub.file_requests("org/kimi")}
    assert set(CODE_FILES) <= fetched
    assert "helper.py" not in fetched
    assert all(f"/resolve/{repo.sha}/" in r.path for r in hub.file_requests("org/kimi"))


def test_without_trust_remote_code_no_code_file_is_fetched(code_hub, tmp_path):
    hub, repo = code_hub
    weights = weights_fetch(
        model_source("org/kimi", revision=repo.sha),
        cache_dir=tmp_path / "cache",
        token=None,
        endpoint=hub.url,
    )
    fetched = [request.path for request in hub.file_requests("org/kimi")]
    assert fetched and not [path for path in fetched if path.endswith(".py")]
    assert not list(weights.path.glob("*.py"))
    assert not (weights.path / "tiktoken.model").exists()


def test_it_picks_code_files_only_when_asked():
    names = ["config.json", "modeling_x.py", "model.safetensors", "sub/x.py", "tiktoken.model"]
    assert vllm_files(names) == ["config.json", "model.safetensors"]
    assert vllm_files(names, code=True) == [
        "config.json",
        "model.safetensors",
        "modeling_x.py",
        "tiktoken.model",
    ]
