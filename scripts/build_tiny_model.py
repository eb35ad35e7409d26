"""Builds a tiny random-weight Llama model folder that real vLLM can serve, offline, in seconds.

Run it with the Python of the vLLM virtualenv (it needs ``tokenizers``, ``transformers`` and
``torch``, which vLLM brings): ``python tests/vllm/build_tiny_model.py OUT_DIR``.

Guarantees: nothing is downloaded; the same folder contents for the same arguments (fixed
seed); a byte-level BPE tokenizer (about 2k tokens) with a chat template, and a
``LlamaForCausalLM`` with 2 layers, hidden size 128, 4 heads and 2 KV heads. The weights are
random: the model produces nonsense quickly, which is all a lifecycle test needs.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>"]


def _corpus(seed: int, lines: int = 4000) -> list[str]:
    rng = random.Random(seed)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to write the model to")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(build(args.out, seed=args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
