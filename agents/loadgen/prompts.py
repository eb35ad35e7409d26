"""Prompts for a load level: random, ShareGPT conversations, a shared prefix + suffix, or
the requests of a trace.

Guarantees:

- Deterministic: the same source, count and seed give the same prompts.
- With a tokenizer, random and prefix prompts have exactly the requested input length (in the
  tokenizer's tokens, counting the special tokens the server adds to a completion prompt,
  before any chat template) and ``prompt_len`` is that length. Without
  one, prompts are words drawn from a list of common English words, about one token each, and
  ``prompt_len`` is an estimate: the server's ``usage.prompt_tokens`` is what gets reported.
- All prompts of a level are built before the level starts: no tokenizer work while requests
  are in flight.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from agents.loadgen.tokenizer import Tokenizer
from agents.workloads import Trace

# Common words that byte-level BPE vocabularies hold as one token (with their leading space).
_WORD_TEXT = (
    "the of and to in is you that it he was for on are as with his they at be this have "
    "from or one had by word but not what all were we when your can said there use an each "
    "which she do how their if will up other about out many then them these so some her "
    "would make like him into time has look two more write go see number no way could people "
    "my than first water been call who oil its now find long down day did get come made may "
    "part over new sound take only little work know place year live me back give most very "
    "after thing our just name good sentence man think say great where help through much "
    "before line right too mean old any same tell boy follow came want show also around form "
    "three small set put end does another well large must big even such because turn here "
    "why ask went men read need land different home us move try kind hand picture again "
    "change off play spell air away animal house point page letter mother answer found study"
)
_WORDS = tuple(_WORD_TEXT.split())

# ShareGPT filtering as in `vllm bench serve`, so the same file gives comparable requests.
_SHAREGPT_MIN_LEN = 4
_SHAREGPT_MAX_PROMPT_LEN = 1024
_SHAREGPT_MAX_TOTAL_LEN = 2048


class DatasetError(ValueError):
    """A dataset file or specification cannot be used."""


@dataclass(frozen=True, slots=True)
class Prompt:
    """One request's prompt text, its (exact or estimated) token length, and output length."""

    text: str
    prompt_len: int
    output_len: int


def _lengths(rng: random.Random, length: int, range_ratio: float, count: int) -> list[int]:
    low = max(1, int(length * (1 - range_ratio)))
    high = max(low, int(length * (1 + range_ratio)))
    return [rng.randint(low, high) for _ in range(count)]


# Token ids that decode to clean text and encode back to themselves, per tokenizer: random
# ids that decode to a broken UTF-8 fragment ("\ufffd") re-encode to several tokens, and a
# prompt built from them may never settle at the requested length.
_CLEAN_POOL_SIZE = 4096
_clean_pools: dict[int, list[int]] = {}


def _clean_ids(tokenizer: Tokenizer) -> list[int]:
    """A fixed (seeded) sample of the tokenizer's round-trip-clean token ids."""
    key = id(tokenizer)
    if key not in _clean_pools:
        vocab = tokenizer.vocab_size
        probe = random.Random(0)  # noqa: S311 - a reproducible sample, not a secret
        pool: list[int] = []
        for _ in range(_CLEAN_POOL_SIZE * 4):
            if len(pool) >= min(_CLEAN_POOL_SIZE, vocab):
                break
            token = probe.randrange(vocab)
            text = tokenizer.decode([token])
            if text.strip() and "\ufffd" not in text and tokenizer.encode(text) == [token]:
                pool.append(token)
        _clean_pools[key] = pool or list(range(vocab))
    return _clean_pools[key]


def _special_tokens(tokenizer: Tokenizer | None) -> int:
    """Tokens the server adds to a completion prompt (a BOS token), counted in its length."""
    return getattr(tokenizer, "special_tokens", 0) if tokenizer is not None else 0


def _random_text(rng: random.Random, length: int, tokenizer: Tokenizer | None) -> tuple[str, int]:
    """Text of ``length`` tokens (exact with a tokenizer), and its token count."""
    if tokenizer is None:
        return " ".join(rng.choices(_WORDS, k=length)), length
    pool = _clean_ids(tokenizer)
    start = rng.randrange(len(pool))
    ids = [pool[(start + step * 7919) % len(pool)] for step in range(length)]
    text = tokenizer.decode(ids)
    # Decoding and re-encoding merges or splits tokens: trim or extend until it is exact.
    for _ in range(16):
        encoded = tokenizer.encode(text)
        if len(encoded) == length:
            return text, length
        if len(encoded) > length:
            text = tokenizer.decode(encoded[:length])
        else:
            extra = [rng.choice(pool) for _ in range(length - len(encoded))]
            text = tokenizer.decode(encoded + extra)
    return text, len(tokenizer.encode(text))


def _exact_suffix(
    rng: random.Random, prefix: str, length: int, tokenizer: Tokenizer
) -> tuple[str, int]:
    """``prefix`` plus a random suffix such that the prompt encodes to the prefix's own tokens
    followed by exactly ``length`` more (a prefix cache then matches the whole prefix), and
    the prompt's token count."""
    prefix_ids = tokenizer.encode(prefix)
    shared = len(prefix_ids)
    pool = _clean_ids(tokenizer)
    text = f"{prefix} {_random_text(rng, length, tokenizer)[0]}"
    # Tokens merge across the join, so adjust the suffix in token space until it holds.
    for _ in range(16):
        encoded = tokenizer.encode(text)
        if encoded[:shared] != prefix_ids:  # the join changed the prefix: another suffix
            text = f"{prefix} {_random_text(rng, length, tokenizer)[0]}"
            continue
        tail = encoded[shared:]
        if len(tail) == length:
            return text, shared + length
        if len(tail) > length:
            tail = tail[:length]
        else:
            tail += [rng.choice(pool) for _ in range(length - len(tail))]
        text = prefix + tokenizer.decode(tail)
    return text, len(tokenizer.encode(text))


@dataclass(frozen=True)
class RandomPrompts:
    """Random prompts as ``vllm bench serve --dataset-name random``."""

    input_len: int
    output_len: int
    range_ratio: float = 0.0

    def sample(
        self, count: int, rng: random.Random, tokenizer: Tokenizer | None = None
    ) -> list[Prompt]:
        inputs = _lengths(rng, self.input_len, self.range_ratio, count)
        outputs = _lengths(rng, self.output_len, self.range_ratio, count)
        prompts = []
        special = _special_tokens(tokenizer)
        for input_len, output_len in zip(inputs, outputs, strict=True):
            text, length = _random_text(rng, max(1, input_len - special), tokenizer)
            prompts.append(Prompt(text, length + special, output_len))
        return prompts


@dataclass(frozen=True)
class PrefixPrompts:
    """``num_prefixes`` shared prefixes of ``shared_len`` tokens, each prompt one of them plus
    a unique suffix of ``suffix_len`` tokens. Each call draws fresh prefixes, so one level's
    prefix-cache hits never come from an earlier level."""

    shared_len: int
    suffix_len: int
    output_len: int
    num_prefixes: int = 1

    def sample(
        self, count: int, rng: random.Random, tokenizer: Tokenizer | None = None
    ) -> list[Prompt]:
        prefixes = [_random_text(rng, self.shared_len, tokenizer) for _ in range(self.num_prefixes)]
        prompts = []
        for index in range(count):
            prefix, prefix_len = prefixes[index % self.num_prefixes]
            if tokenizer is not None:
                special = _special_tokens(tokenizer)
                suffix_len = max(1, self.suffix_len - special)
                text, length = _exact_suffix(rng, prefix, suffix_len, tokenizer)
                length += special
            else:
                suffix, suffix_len = _random_text(rng, self.suffix_len, None)
                # Joined by a space so the prefix's words stay the same in every prompt.
                text, length = f"{prefix} {suffix}", prefix_len + suffix_len
            prompts.append(Prompt(text, length, self.output_len))
        return prompts


def _estimate_tokens(text: str) -> int:
    # About four characters per token for English text in common BPE vocabularies.
    return max(1, round(len(text) / 4))


@dataclass(frozen=True)
class ShareGptPrompts:
    """First human turn and first reply of each conversation in a ShareGPT-format JSON file
    (``[{"conversations": [{"from": "human", "value": …}, {"from": "gpt", …}]}, …]``).
    ``output_len`` replaces the reply's length when given."""

    path: Path
    output_len: int | None = None

    def _pairs(self) -> list[tuple[str, str]]:
        try:
            data = json.loads(Path(self.path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise DatasetError(f"cannot read ShareGPT file {str(self.path)!r}: {exc}") from exc
        except ValueError as exc:
            raise DatasetError(f"ShareGPT file {str(self.path)!r} is not JSON: {exc}") from exc
        if not isinstance(data, list):
            raise DatasetError("a ShareGPT file is a JSON list of conversations")
        pairs = []
        for entry in data:
            turns = entry.get("conversations") if isinstance(entry, dict) else None
            if not isinstance(turns, list) or len(turns) < 2:
                continue
            first, second = turns[0], turns[1]
            if not (isinstance(first, dict) and isinstance(second, dict)):
                continue
            prompt, reply = first.get("value"), second.get("value")
            if isinstance(prompt, str) and isinstance(reply, str):
                pairs.append((prompt, reply))
        return pairs

    def load(self, tokenizer: Tokenizer | None = None) -> list[Prompt]:
        """Every usable conversation as a prompt, in file order."""
        prompts = []
        for text, reply in self._pairs():
            if tokenizer is not None:
                prompt_len = len(tokenizer.encode(text))
                reply_len = len(tokenizer.encode(reply))
            else:
                prompt_len, reply_len = _estimate_tokens(text), _estimate_tokens(reply)
            output_len = self.output_len or reply_len
            if prompt_len < _SHAREGPT_MIN_LEN or prompt_len > _SHAREGPT_MAX_PROMPT_LEN:
                continue
            if self.output_len is None and output_len < _SHAREGPT_MIN_LEN:
                continue
            if prompt_len + output_len > _SHAREGPT_MAX_TOTAL_LEN:
                continue
            prompts.append(Prompt(text, prompt_len, output_len))
        if not prompts:
            raise DatasetError(f"no usable conversation in ShareGPT file {str(self.path)!r}")
        return prompts

    def sample(
        self, count: int, rng: random.Random, tokenizer: Tokenizer | None = None
    ) -> list[Prompt]:
        prompts = self.load(tokenizer)
        order = list(range(len(prompts)))
        rng.shuffle(order)
        # A file with fewer conversations than requests is reused in the same shuffled order.
        return [prompts[order[index % len(order)]] for index in range(count)]


class BlockText:
    """The words of hash-id blocks (``block_size`` each): the same words for the same id
    wherever it appears, drawn from ``salt`` (a level draws a salt of its own)."""

    def __init__(self, block_size: int, salt: int):
        self.block_size, self.salt = block_size, salt
        self._blocks: dict[int, list[str]] = {}

    def block(self, hash_id: int) -> list[str]:
        if hash_id not in self._blocks:
            draw = random.Random(f"{self.salt}:{hash_id}")  # noqa: S311 - reproducible text
            self._blocks[hash_id] = draw.choices(_WORDS, k=self.block_size)
        return self._blocks[hash_id]

    def words(self, hash_ids: tuple[int, ...], length: int, fill: random.Random) -> list[str]:
        """``length`` words: the blocks of ``hash_ids`` in order (the last cut to fit), then
        words from ``fill`` for what no id names."""
        words: list[str] = []
        for hash_id in hash_ids:
            words.extend(self.block(hash_id)[: length - len(words)])
        words.extend(fill.choices(_WORDS, k=length - len(words)))
        return words


@dataclass(frozen=True)
class TracePrompts:
    """The requests of a trace (``agents.workloads``; already windowed) as prompts, in the
    trace's order, with its input and output lengths.

    A request's first ``len(hash_ids)`` blocks of ``trace.block_size`` tokens are the text
    of those hash ids (the last one cut to the request's length), the rest unique text: two
    requests sharing a hash-id prefix share exactly that text, so a server's prefix cache
    sees what the trace shares. Blocks are words joined by spaces (about one token each):
    byte-level BPE never merges across a space, so shared blocks are shared tokens whatever
    the tokenizer; with a tokenizer given, ``prompt_len`` is its count, not forced exact.
    Each call draws the blocks' text afresh from ``rng``: one level's prefix-cache hits never
    come from an earlier level.
    """

    trace: Trace

    def __len__(self) -> int:
        return len(self.trace.requests)

    def offsets(self, rate: float) -> list[float]:
        """When each request is sent at a mean ``rate`` (requests/s): the trace's times
        scaled by ``time_scale(rate)``; all at 0 for ``math.inf``."""
        scale = self.time_scale(rate)
        if scale is None:
            return [0.0] * len(self)
        return [request.offset * scale for request in self.trace.requests]

    def time_scale(self, rate: float) -> float | None:
        """The factor the trace's times are multiplied by for a mean ``rate``; None when
        every request is sent at once (an ``inf`` rate, or a trace of one instant)."""
        trace_rate = self.trace.mean_rate
        if rate == float("inf") or trace_rate == float("inf"):
            return None
        return trace_rate / rate

    def sample(
        self, count: int, rng: random.Random, tokenizer: Tokenizer | None = None
    ) -> list[Prompt]:
        """``count`` prompts: the trace's requests in order, from the first again when
        ``count`` is larger."""
        blocks = BlockText(self.trace.block_size, rng.getrandbits(64))
        special = _special_tokens(tokenizer)
        prompts = []
        requests = self.trace.requests
        for index in range(count):
            request = requests[index % len(requests)]
            length = max(1, request.input_len - special)
            text = " ".join(blocks.words(request.hash_ids, length, rng))
            prompt_len = len(tokenizer.encode(text)) if tokenizer is not None else length
            prompts.append(Prompt(text, prompt_len + special, request.output_len))
        return prompts
