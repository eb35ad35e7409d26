"""Prompt sources: seeded, exact with a tokenizer, ShareGPT files read like vLLM does."""

from __future__ import annotations

import json
import random

import pytest

from agents.loadgen.prompts import DatasetError, PrefixPrompts, RandomPrompts, ShareGptPrompts
from agents.loadgen.tokenizer import TokenizerError, load_tokenizer


class CharTokenizer:
    """A toy tokenizer whose decode/encode round trip is not the identity: a token is one
    character, and decoding drops spaces that would start the text, as real ones can."""

    vocab_size = 26

    def encode(self, text: str) -> list[int]:
        return [ord(char) - 97 for char in text if char.isalpha()]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(97 + token % 26) for token in ids)


def test_random_prompts_are_seeded_and_sized():
    source = RandomPrompts(input_len=50, output_len=20)
    first = source.sample(10, random.Random(1))
    assert first == source.sample(10, random.Random(1))
    assert first != source.sample(10, random.Random(2))
    assert {len(p.text.split()) for p in first} == {50}
    assert {(p.prompt_len, p.output_len) for p in first} == {(50, 20)}
    assert len({p.text for p in first}) == 10  # no two requests share a cacheable prompt


def test_random_lengths_stay_within_the_range_ratio():
    prompts = RandomPrompts(100, 40, range_ratio=0.5).sample(300, random.Random(0))
    inputs = [p.prompt_len for p in prompts]
    outputs = [p.output_len for p in prompts]
    assert min(inputs) >= 50 and max(inputs) <= 150 and len(set(inputs)) > 20
    assert min(outputs) >= 20 and max(outputs) <= 60


def test_a_tokenizer_makes_input_lengths_exact():
    tokenizer = CharTokenizer()
    for prompt in RandomPrompts(37, 5, range_ratio=0.3).sample(20, random.Random(0), tokenizer):
        assert len(tokenizer.encode(prompt.text)) == prompt.prompt_len


def test_prefix_prompts_share_their_prefix_and_differ_after_it():
    source = PrefixPrompts(shared_len=30, suffix_len=10, output_len=8, num_prefixes=2)
    prompts = source.sample(6, random.Random(0))
    prefixes = [" ".join(p.text.split()[:30]) for p in prompts]
    assert prefixes[0] == prefixes[2] == prefixes[4] != prefixes[1] == prefixes[3]
    assert len({p.text for p in prompts}) == 6
    assert {p.prompt_len for p in prompts} == {40}
    # A new level draws new prefixes: nothing cached by the last level is reused.
    assert source.sample(1, random.Random(1))[0].text.split()[:30] != prompts[0].text.split()[:30]


def write_sharegpt(tmp_path, conversations) -> str:
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(conversations))
    return path


def conversation(prompt: str, reply: str) -> dict:
    return {"conversations": [{"from": "human", "value": prompt}, {"from": "gpt", "value": reply}]}


def test_sharegpt_takes_the_first_turn_pair_and_filters_like_vllm(tmp_path):
    long_prompt = "word " * 2000
    path = write_sharegpt(
        tmp_path,
        [
            conversation("Tell me about the sea and its tides, please.", "The sea " * 20),
            conversation("hi", "The sea " * 20),  # prompt under 4 tokens
            conversation(long_prompt, "ok then fine sure"),  # prompt over 1024 tokens
            {"conversations": [{"from": "human", "value": "alone"}]},  # no reply
            {"unrelated": True},
        ],
    )
    prompts = ShareGptPrompts(path).load()
    assert [p.text for p in prompts] == ["Tell me about the sea and its tides, please."]
    assert prompts[0].output_len == 40  # 160 characters ≈ 40 tokens without a tokenizer
    sampled = ShareGptPrompts(path, output_len=7).sample(3, random.Random(0))
    assert [p.output_len for p in sampled] == [7, 7, 7]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("{not json", "not JSON"),
        ('{"a": 1}', "JSON list"),
        ("[]", "no usable"),
    ],
)
def test_sharegpt_problems_are_clear_errors(tmp_path, content, message):
    path = tmp_path / "data.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(DatasetError, match=message):
        ShareGptPrompts(path).load()


def test_no_tokenizer_is_fine_and_a_missing_one_is_a_clear_error(tmp_path):
    assert load_tokenizer(None) is None
    assert load_tokenizer("none") is None
    with pytest.raises(TokenizerError, match="does not exist"):
        load_tokenizer(str(tmp_path / "missing"))


@pytest.fixture(scope="module")
def bpe_tokenizer_json(tmp_path_factory):
    """A real byte-level BPE tokenizer (the kind Llama-family models ship), trained here on
    made-up words in a second: nothing is downloaded."""
    tokenizers = pytest.importorskip("tokenizers")
    from scripts.build_tiny_model import SPECIAL, _corpus

    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=2048,
        special_tokens=SPECIAL,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(0, lines=1000), trainer=trainer)
    folder = tmp_path_factory.mktemp("tokenizer")
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def test_a_real_bpe_tokenizer_gives_exact_lengths_for_random_and_prefix_prompts(
    bpe_tokenizer_json,
):
    # A folder and the file itself are both accepted.
    for location in (bpe_tokenizer_json, bpe_tokenizer_json / "tokenizer.json"):
        tokenizer = load_tokenizer(str(location))
        assert tokenizer is not None and tokenizer.vocab_size > 256
        rng = random.Random(0)
        for prompt in RandomPrompts(100, 8, range_ratio=0.5).sample(30, rng, tokenizer):
            assert len(tokenizer.encode(prompt.text)) == prompt.prompt_len
        prefix = PrefixPrompts(shared_len=64, suffix_len=16, output_len=8, num_prefixes=2)
        prompts = prefix.sample(6, rng, tokenizer)
        for prompt in prompts:
            assert len(tokenizer.encode(prompt.text)) == prompt.prompt_len == 80
        # Prompts with the same prefix share its first 64 tokens exactly (what a prefix
        # cache matches on), and differ after it.
        first, third = (tokenizer.encode(prompts[i].text) for i in (0, 2))
        assert first[:64] == third[:64] and first[64:] != third[64:]


def test_exact_lengths_hold_for_every_prompt_not_most(bpe_tokenizer_json):
    # Random token ids that decode to broken UTF-8 made about one prompt in ten miss its
    # length with this kind of tokenizer (seen against real vLLM: 1,537 tokens for 24 × 64).
    tokenizer = load_tokenizer(str(bpe_tokenizer_json))
    for length in (1, 7, 64, 257):
        prompts = RandomPrompts(length, 4).sample(60, random.Random(length), tokenizer)
        assert {prompt.prompt_len for prompt in prompts} == {length}
        assert all(len(tokenizer.encode(prompt.text)) == length for prompt in prompts)


def test_prompts_count_the_bos_token_the_server_adds(bpe_tokenizer_json, tmp_path):
    """vLLM tokenizes a completion prompt with special tokens: a tokenizer that adds a BOS
    gets prompts one token shorter, so the server counts exactly the requested length."""
    tokenizers = pytest.importorskip("tokenizers")
    tokenizer = tokenizers.Tokenizer.from_file(str(bpe_tokenizer_json / "tokenizer.json"))
    tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tokenizer.token_to_id("<s>"))]
    )
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    with_bos = load_tokenizer(str(tmp_path / "tokenizer.json"))
    assert with_bos.special_tokens == 1
    assert load_tokenizer(str(bpe_tokenizer_json)).special_tokens == 0
    hub_tokenizer = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))

    def server_count(text: str) -> int:
        return len(hub_tokenizer.encode(text, add_special_tokens=True).ids)

    rng = random.Random(1)
    for prompt in RandomPrompts(50, 8, range_ratio=0.5).sample(20, rng, with_bos):
        assert server_count(prompt.text) == prompt.prompt_len
    prefix = PrefixPrompts(shared_len=32, suffix_len=16, output_len=8)
    for prompt in prefix.sample(4, rng, with_bos):
        assert server_count(prompt.text) == prompt.prompt_len == 48
