"""The HTTP/1.1 client: framing, keep-alive, and every failure as a counted kind."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import threading
import time

import pytest

from agents.loadgen import http
from agents.loadgen.http import (
    BufferSink,
    ConnectionPool,
    HttpError,
    build_request,
    fetch,
    parse_base_url,
)
from agents.loadgen.http_framing import ChunkedDecoder

CHUNKED = b"4;ext=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-Trailer: 1\r\n\r\n"


@pytest.fixture(
    autouse=True,
    params=[
        pytest.param(
            True,
            id="kernel-stamps",
            marks=pytest.mark.skipif(
                sys.platform != "linux", reason="kernel receive stamps are Linux's"
            ),
        ),
        pytest.param(False, id="loop-stamps"),
    ],
)
def kernel_stamps(request, monkeypatch):
    """Every test runs over both connection kinds: the raw socket read with the kernel's
    receive stamps, and asyncio's transport (what TLS and other systems use)."""
    monkeypatch.setattr(http, "KERNEL_STAMPS", request.param)
    return request.param


def test_chunked_decoding_survives_any_split():
    for cut_size in range(1, len(CHUNKED) + 1):
        decoder = ChunkedDecoder()
        decoded = b"".join(
            decoder.feed(CHUNKED[i : i + cut_size]) for i in range(0, len(CHUNKED), cut_size)
        )
        assert decoded == b"Wikipedia in\r\n\r\nchunks."
        assert decoder.done


def test_chunked_decoding_takes_whole_chunks_then_whatever_follows():
    # Whole chunks with bare sizes go the fast way; an extension, a part of a chunk and the
    # last chunk with its trailers the careful way, in the same feed or the next.
    stream = b"5\r\nhello\r\n1\r\n \r\n5;x=1\r\nworld\r\n3\r\n!!!\r\n0\r\nT: 1\r\n\r\n"
    for cut in range(len(stream) + 1):
        decoder = ChunkedDecoder()
        decoded = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:])
        assert decoded == b"hello world!!!" and decoder.done


@pytest.mark.parametrize(
    "stream", [b"zz\r\nabc", b"3\r\nabcX\r\n", b"\r\n", b"0x3\r\nabc\r\n", b"-1\r\n"]
)
def test_chunked_decoding_refuses_malformed_framing(stream):
    with pytest.raises(ValueError):
        ChunkedDecoder().feed(stream)


def test_it_parses_base_urls_and_refuses_others():
    origin = parse_base_url("https://example.test/api/")
    assert (origin.scheme, origin.host, origin.port, origin.base_path) == (
        "https",
        "example.test",
        443,
        "/api",
    )
    assert parse_base_url("http://127.0.0.1:8000").host_header == "127.0.0.1:8000"
    for bad in ("ftp://x", "127.0.0.1:8000", "http://x/?q=1", "http://x:notaport"):
        with pytest.raises(ValueError):
            parse_base_url(bad)


@contextlib.asynccontextmanager
async def raw_server(handler):
    """A TCP server on 127.0.0.1 whose ``handler(reader, writer)`` speaks raw bytes."""
    connections = []

    async def on_connect(reader, writer):
        connections.append(writer)
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = ConnectionPool(parse_base_url(f"http://127.0.0.1:{port}"), connect_timeout=2)
    try:
        yield pool, connections
    finally:
        pool.close()
        server.close()
        await server.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await reader.readexactly(int(line.split(b":")[1]))
    return head


async def test_it_reads_a_content_length_body_and_reuses_the_connection():
    async def handler(reader, writer):
        for _ in range(2):
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
            await writer.drain()

    async with raw_server(handler) as (pool, _):
        first = await fetch(pool, "/a")
        second = await fetch(pool, "/b")
    assert (first.status, first.body, second.body) == (200, b"hello", b"hello")
    assert pool.opened == 1


async def test_it_times_chunked_pieces_as_they_arrive():
    release = asyncio.Event()

    async def handler(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await writer.drain()
        await release.wait()
        writer.write(b"6\r\nsecond\r\n0\r\n\r\n")
        await writer.drain()
        await reader.read()

    class Recorder(BufferSink):
        def __init__(self):
            super().__init__()
            self.pieces = []

        def on_body(self, data, now):
            super().on_body(data, now)
            self.pieces.append((data, now))
            release.set()

    async with raw_server(handler) as (pool, _):
        sink = Recorder()
        await pool.send(build_request(pool.origin, "GET", "/"), sink, timeout=5)
    assert [data for data, _ in sink.pieces] == [b"first", b"second"]
    assert sink.pieces[0][1] < sink.pieces[1][1]


async def test_it_skips_interim_responses_and_reads_until_close_without_a_length():
    async def handler(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\n\r\nuntil ")
        await writer.drain()
        writer.write(b"close")
        await writer.drain()

    async with raw_server(handler) as (pool, _):
        response = await fetch(pool, "/")
    assert (response.status, response.body) == (200, b"until close")


async def test_it_retries_once_when_the_server_closed_an_idle_keep_alive_connection():
    async def handler(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        # Reads the next request, then closes without answering: a keep-alive timeout race.
        await reader.readuntil(b"\r\n\r\n")

    async with raw_server(handler) as (pool, _):
        await fetch(pool, "/")
        second = await fetch(pool, "/")
    assert second.body == b"ok"
    assert pool.opened == 2


async def test_it_does_not_reuse_a_connection_the_server_says_it_closes():
    async def handler(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()

    async with raw_server(handler) as (pool, _):
        await fetch(pool, "/")
        await fetch(pool, "/")
    assert pool.opened == 2


@pytest.mark.parametrize(
    ("response", "kind"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "stream_ended_early"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", "stream_ended_early"),
        (b"", "stream_ended_early"),
        (b"SPDY/9 200 OK\r\n\r\n", "malformed_http"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\n", "malformed_http"),
    ],
)
async def test_a_broken_response_fails_with_its_kind(response, kind):
    async def handler(reader, writer):
        await read_request(reader)
        writer.write(response)
        await writer.drain()

    async with raw_server(handler) as (pool, _):
        with pytest.raises(HttpError) as caught:
            await fetch(pool, "/")
    assert caught.value.kind == kind


async def test_a_slow_response_fails_as_a_timeout():
    async def handler(reader, writer):
        await read_request(reader)
        await asyncio.sleep(5)

    async with raw_server(handler) as (pool, _):
        with pytest.raises(HttpError) as caught:
            await fetch(pool, "/", timeout=0.2)
    assert caught.value.kind == "timeout"


async def test_a_closed_port_fails_as_connection_refused():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pool = ConnectionPool(parse_base_url(f"http://127.0.0.1:{port}"))
    with pytest.raises(HttpError) as caught:
        await fetch(pool, "/")
    assert caught.value.kind == "connection_refused"


async def test_it_stamps_bytes_when_they_arrived_not_when_the_loop_read_them(kernel_stamps):
    """The server (a thread) writes a piece while the client's event loop is busy for 0.3 s:
    with kernel stamps the piece is timed when it arrived, else when the loop got to it."""
    listener = socket.create_server(("127.0.0.1", 0))
    written: list[float] = []

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            time.sleep(0.05)  # the client is asleep in on_head by now
            written.append(time.perf_counter())
            connection.sendall(b"5\r\nfirst\r\n0\r\n\r\n")

    class BusySink(BufferSink):
        pieces: list[float] = []

        def on_head(self, status, headers):
            super().on_head(status, headers)
            time.sleep(0.3)  # the whole event loop stops, as under a burst of other streams

        def on_body(self, data, now):
            super().on_body(data, now)
            self.pieces.append(now)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    port = listener.getsockname()[1]
    pool = ConnectionPool(parse_base_url(f"http://127.0.0.1:{port}"), connect_timeout=2)
    sink = BusySink()
    try:
        await pool.send(build_request(pool.origin, "GET", "/"), sink, timeout=5)
    finally:
        pool.close()
        listener.close()
        server.join(5)
    late = sink.pieces[0] - written[0]
    if kernel_stamps:
        assert 0 <= late < 0.1
    else:
        assert late > 0.2
