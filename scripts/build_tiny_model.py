"""Builds a tiny random-weight Llama model that real vLLM can serve, offline, in seconds.

Run it with the Python of the vLLM virtualenv (it needs ``tokenizers``, ``transformers`` and
``torch``, which vLLM brings); it imports nothing of this project:

    python scripts/build_tiny_model.py OUT_DIR                    # a plain model folder
    python scripts/build_tiny_model.py --hf-home DIR --repo-id benchsite/tiny-random-llama

The second form writes the model into a Hugging Face cache (``DIR/hub``) as if it had been
downloaded, so that ``HF_HOME=DIR HF_HUB_OFFLINE=1 vllm serve benchsite/tiny-random-llama``
serves it by its repo id — the way a machine with its weights already cached runs a job.

Guarantees: nothing is downloaded; the same folder contents for the same arguments (fixed
seed); a byte-level BPE tokenizer (about 2k tokens) with a chat template, and a
``LlamaForCausalLM`` with 2 layers, hidden size 128, 4 heads and 2 KV heads. The weights are
random: the model produces nonsense quickly, which is all a lifecycle test or a CPU demo
needs. In a cache the snapshot appears whole or not at all (``refs/main`` is written last),
and a snapshot already there is kept, not rebuilt.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>"]


def _corpus(seed: int, lines: int = 4000) -> list[str]:
    rng = random.Random(seed)  # noqa: S311 - reproducible filler text, not a secret
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choices(letters, k=rng.randint(2, 9))) for _ in range(3000)]
    common = "the of and to in is you that it he was for on are as with his they"
    words += common.split()
    return [" ".join(rng.choices(words, k=rng.randint(5, 30))) for _ in range(lines)]


def build(out: Path, *, vocab_size: int = 2048, seed: int = 0) -> Path:
    """Writes the model folder to ``out`` and returns it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="</s>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    return out


def build_in_hf_cache(hf_home: Path, repo_id: str, *, seed: int = 0) -> Path:
    """Puts the model into the Hugging Face cache under ``hf_home`` as ``repo_id`` at revision
    ``main`` (unless it is there already) and returns its snapshot folder."""
    repo = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    # A stand-in commit hash (40 hex digits, like Git's): the same for the same inputs.
    key = f"benchsite-tiny-llama:{repo_id}:{seed}".encode()
    commit = hashlib.sha256(key).hexdigest()[:40]
    snapshot = repo / "snapshots" / commit
    ref = repo / "refs" / "main"
    if ref.is_file() and (snapshot / "config.json").is_file():
        return snapshot
    # Built aside and renamed into place, so a snapshot folder is always whole.
    if not (snapshot / "config.json").is_file():
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".building-", dir=snapshot.parent))
        try:
            build(scratch, seed=seed)
            try:
                scratch.rename(snapshot)
            except OSError:
                if not (snapshot / "config.json").is_file():
                    raise
                # else a concurrent build got there first; its snapshot is the same
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    ref.parent.mkdir(parents=True, exist_ok=True)
    partial = ref.with_suffix(".tmp")
    partial.write_text(commit)
    os.replace(partial, ref)
    return snapshot


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?", help="folder to write the model to")
    parser.add_argument("--hf-home", type=Path, help="a Hugging Face cache to put it in")
    parser.add_argument("--repo-id", default="benchsite/tiny-random-llama")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if (args.out is None) == (args.hf_home is None):
        parser.error("give either OUT or --hf-home")
    if args.hf_home is not None:
        print(build_in_hf_cache(args.hf_home, args.repo_id, seed=args.seed))
    else:
        print(build(args.out, seed=args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
