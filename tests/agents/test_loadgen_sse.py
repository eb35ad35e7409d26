"""The SSE parser: complete data payloads whatever way the bytes are split."""

from __future__ import annotations

import pytest

from agents.loadgen.sse import SseParser


def feed_all(pieces: list[bytes]) -> tuple[list[bytes], SseParser]:
    parser = SseParser()
    events: list[bytes] = []
    for piece in pieces:
        events.extend(parser.feed(piece))
    return events, parser


def every_split(stream: bytes):
    """The stream whole, byte by byte, and cut in two at every position."""
    yield [stream]
    yield [stream[i : i + 1] for i in range(len(stream))]
    for cut in range(1, len(stream)):
        yield [stream[:cut], stream[cut:]]


VLLM_STREAM = (
    b'data: {"choices":[{"text":" a"}]}\n\n'
    b'data: {"choices":[{"text":" b"}]}\n\n'
    b'data: {"choices":[],"usage":{"completion_tokens":2}}\n\n'
    b"data: [DONE]\n\n"
)
VLLM_EVENTS = [
    b'{"choices":[{"text":" a"}]}',
    b'{"choices":[{"text":" b"}]}',
    b'{"choices":[],"usage":{"completion_tokens":2}}',
    b"[DONE]",
]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_it_reads_events_split_anywhere_with_any_line_ending(newline):
    stream = VLLM_STREAM.replace(b"\n", newline)
    for pieces in every_split(stream):
        events, parser = feed_all(pieces)
        assert events == VLLM_EVENTS, pieces
        assert not parser.pending


def test_it_does_not_take_a_crlf_split_across_feeds_for_two_line_ends():
    # "data: x\r" | "\n" | "\r\n": one event, not an event and a stray blank line.
    events, _ = feed_all([b"data: x\r", b"\n", b"\r\n", b"data: y\r\n\r\n"])
    assert events == [b"x", b"y"]


def test_it_joins_multi_line_data_with_newlines():
    events, _ = feed_all([b"data: first\ndata: second\ndata:third\n\n"])
    assert events == [b"first\nsecond\nthird"]


def test_it_skips_comments_and_other_fields():
    stream = b": keep-alive\n\nevent: message\nid: 7\nretry: 10\ndata: payload\n\n: ping\n\n"
    events, _ = feed_all([stream])
    assert events == [b"payload"]


def test_it_drops_only_one_space_after_the_colon():
    events, _ = feed_all([b"data:  two spaces\n\ndata\n\n"])
    assert events == [b" two spaces", b""]


def test_it_holds_an_unfinished_event_until_its_blank_line():
    parser = SseParser()
    assert parser.feed(b"data: par") == []
    assert parser.pending
    assert parser.feed(b"tial\n") == []
    assert parser.feed(b"\n") == [b"partial"]
    assert not parser.pending


def test_extra_blank_lines_between_events_are_ignored():
    for pieces in every_split(b"\n\ndata: a\n\n\n\n\ndata: b\n\n\n"):
        events, _ = feed_all(pieces)
        assert events == [b"a", b"b"], pieces
