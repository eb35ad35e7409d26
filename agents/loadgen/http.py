"""A small HTTP/1.1 client over asyncio protocols, built for timing streamed responses.

Guarantees:

- Response bytes are handed to a ``ResponseSink`` together with the time they arrived, on the
  ``time.perf_counter()`` clock. Plain-HTTP connections on Linux read that time from the
  kernel, which stamps every segment as it reaches the socket (``SO_TIMESTAMPNS``): however
  many streams the event loop serves and however late it reads, the stamp is the arrival.
  Elsewhere (TLS, other systems) it is read in the transport's ``data_received`` callback,
  before any other work: no task wake-up sits between the socket and the timestamp.
- A request is written with one ``transport.write`` of pre-built bytes, which sends at once on
  an idle socket; building the bytes is the caller's job, before the clock starts.
- Bodies framed by ``Content-Length``, ``Transfer-Encoding: chunked`` or connection close are
  decoded; interim 1xx responses are skipped. Connections are kept alive and reused (LIFO);
  a reused connection that the server had closed is retried once on a fresh one.
- Every failure surfaces as ``HttpError`` with a ``kind`` fit for counting
  (``connection_refused``, ``connect_timeout``, ``connection_error``, ``timeout``,
  ``stream_ended_early``, ``malformed_http``), never as a bare ``OSError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl as ssl_module
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter, perf_counter_ns, time_ns
from typing import Protocol
from urllib.parse import urlsplit

# A response head larger than this is not an HTTP server we can benchmark.
MAX_HEAD_BYTES = 64 * 1024
# The longest chunk-size line (hex digits plus extensions) we accept.
MAX_CHUNK_LINE = 4096
_HEX_DIGITS = b"0123456789abcdefABCDEF"

# Kernel receive stamps (Linux): the socket option and its control message share one number,
# the same on x86-64 and arm64 (the generic ABI); Python's socket module does not name it.
# A TCP read carries the stamp of the latest segment it consumed, in CLOCK_REALTIME.
KERNEL_STAMPS = sys.platform == "linux"
_SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@qq")
# One read takes at most this much: a streamed response arrives in far smaller pieces, and a
# larger buffer costs an allocation of its size on every read.
_READ_SIZE = 64 * 1024


class HttpError(Exception):
    """A request failed before a complete response was read. ``kind`` is a short, stable
    name for counting failures; the message is a human-readable sample."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class ResponseSink(Protocol):
    """Receives one response as it arrives. Called on the event loop; must not block."""

    def on_head(self, status: int, headers: dict[str, str]) -> None: ...

    def on_body(self, data: bytes, now: float) -> None: ...

    def on_end(self) -> None: ...


@dataclass(frozen=True)
class Origin:
    """Where requests go: ``scheme://host:port`` plus the base path of the API. With
    ``addresses`` (IP addresses the site resolved ``host`` to and checked), connections go to
    those only, in order, and ``host`` stays the Host header and the TLS server name: the
    name is never looked up again, so it cannot answer elsewhere (DNS rebinding)."""

    scheme: str
    host: str
    port: int
    base_path: str
    addresses: tuple[str, ...] = ()

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"

    def path(self, suffix: str) -> str:
        return f"{self.base_path}{suffix}"


def parse_base_url(url: str, addresses: tuple[str, ...] = ()) -> Origin:
    """Splits ``http(s)://host[:port][/base]``, to be reached at ``addresses`` when given (see
    ``Origin``); raises ``ValueError`` for anything else."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"a base URL has no query or fragment: {url!r}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise ValueError(f"bad port in {url!r}") from exc
    return Origin(parts.scheme, parts.hostname, port, parts.path.rstrip("/"), tuple(addresses))


def build_request(
    origin: Origin,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
) -> bytes:
    """The exact bytes of one HTTP/1.1 request (keep-alive)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {origin.host_header}"]
    lines.extend(f"{name}: {value}" for name, value in (headers or {}).items())
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _chunk_size_digits(line: bytes) -> bytes:
    """The hex digits of a chunk-size line with extensions or spaces; ``ValueError`` when it
    has none or anything else."""
    digits = line.split(b";", 1)[0].strip()
    if not digits or digits.strip(_HEX_DIGITS):
        raise ValueError(f"bad chunk size {line[:40]!r}")
    return digits


class ChunkedDecoder:
    """Decodes ``Transfer-Encoding: chunked`` incrementally; ``done`` after the last chunk
    and its trailers. Raises ``ValueError`` on malformed framing."""

    __slots__ = ("_buffer", "_remaining", "_state", "done")

    _SIZE, _DATA, _DATA_END, _TRAILER = range(4)

    def __init__(self) -> None:
        self._buffer = b""
        self._remaining = 0
        self._state = self._SIZE
        self.done = False

    def feed(self, data: bytes) -> bytes:
        buffer = self._buffer + data if self._buffer else data
        out: list[bytes] = []
        position, size = 0, len(buffer)
        if self._state == self._SIZE:
            position = self._whole_chunks(buffer, out)
        while position < size and not self.done:
            state = self._state
            if state == self._SIZE:
                end = buffer.find(b"\r\n", position)
                if end < 0:
                    if size - position > MAX_CHUNK_LINE:
                        raise ValueError("chunk size line too long")
                    break
                digits = buffer[position:end]
                if not digits or digits.strip(_HEX_DIGITS):
                    digits = _chunk_size_digits(digits)  # extensions, spaces, or malformed
                position = end + 2
                length = int(digits, 16)
                if not length:
                    self._state = self._TRAILER
                    continue
                data_end = position + length
                if data_end + 2 <= size:
                    # The common case: the whole chunk is here, take it in one step.
                    if buffer[data_end : data_end + 2] != b"\r\n":
                        raise ValueError("chunk data not followed by CRLF")
                    out.append(buffer[position:data_end])
                    position = data_end + 2
                    continue
                self._remaining = length
                self._state = self._DATA
            elif state == self._DATA:
                end = min(size, position + self._remaining)
                out.append(buffer[position:end])
                self._remaining -= end - position
                position = end
                if not self._remaining:
                    self._state = self._DATA_END
            elif state == self._DATA_END:
                if size - position < 2:
                    break
                if buffer[position : position + 2] != b"\r\n":
                    raise ValueError("chunk data not followed by CRLF")
                position += 2
                self._state = self._SIZE
            else:  # trailers, ending with an empty line
                end = buffer.find(b"\r\n", position)
                if end < 0:
                    if size - position > MAX_CHUNK_LINE:
                        raise ValueError("trailer line too long")
                    break
                self.done = end == position
                position = end + 2
        self._buffer = buffer[position:]
        if not out:
            return b""
        return out[0] if len(out) == 1 else b"".join(out)

    @staticmethod
    def _whole_chunks(buffer: bytes, out: list[bytes]) -> int:
        """The common case, a run of whole chunks with bare sizes, in a tight loop: appends
        their data to ``out`` and returns where the first other thing starts (the last chunk,
        a part, an extension, an error), for ``feed``'s state machine to read."""
        position = 0
        find = buffer.find
        while (end := find(b"\r\n", position)) >= 0:
            digits = buffer[position:end]
            if not digits or digits.strip(_HEX_DIGITS):
                break
            length = int(digits, 16)
            data_end = end + 2 + length
            if not length or buffer[data_end : data_end + 2] != b"\r\n":
                break
            out.append(buffer[end + 2 : data_end])
            position = data_end + 2
        return position


class _Exchange:
    """One request/response on a connection: parses the head, then frames the body."""

    __slots__ = (
        "_buffer",
        "_chunked",
        "_remaining",
        "_state",
        "finished",
        "future",
        "keep_alive",
        "received",
        "sink",
    )

    _HEAD, _LENGTH, _CHUNKED, _UNTIL_CLOSE, _DONE = range(5)

    def __init__(self, sink: ResponseSink, future: asyncio.Future):
        self.sink = sink
        self.future = future
        self.received = 0
        self.keep_alive = False
        self.finished = False  # read once per read: an attribute, not a property
        self._state = self._HEAD
        self._buffer = b""
        self._remaining = 0
        self._chunked: ChunkedDecoder | None = None

    def feed(self, data: bytes, now: float) -> None:
        """Consumes bytes; raises ``HttpError`` on malformed framing."""
        self.received += len(data)
        state = self._state
        if state == self._CHUNKED:
            try:
                payload = self._chunked.feed(data)
            except ValueError as exc:
                raise HttpError("malformed_http", f"chunked encoding: {exc}") from None
            if payload:
                self.sink.on_body(payload, now)
            if self._chunked.done:
                self._finish()
        elif state == self._LENGTH:
            piece = data[: self._remaining]
            self._remaining -= len(piece)
            if piece:
                self.sink.on_body(piece, now)
            if not self._remaining:
                self._finish()
        elif state == self._UNTIL_CLOSE:
            self.sink.on_body(data, now)
        elif state == self._HEAD:
            self._feed_head(data, now)
        # Bytes after a complete response are ignored: we never pipeline.

    def _feed_head(self, data: bytes, now: float) -> None:
        buffer = self._buffer + data
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(buffer) > MAX_HEAD_BYTES:
                raise HttpError("malformed_http", "response head too large")
            self._buffer = buffer
            return
        head, rest = buffer[:end], buffer[end + 4 :]
        self._buffer = b""
        status, version, headers = _parse_head(head)
        if 100 <= status < 200 and status != 101:
            if rest:
                self._feed_head(rest, now)  # an interim response: the real one follows
            return
        connection = headers.get("connection", "").lower()
        if version == "HTTP/1.0":
            self.keep_alive = "keep-alive" in connection
        else:
            self.keep_alive = "close" not in connection
        self.sink.on_head(status, headers)
        encoding = headers.get("transfer-encoding", "").lower()
        if status in (204, 304):
            self._finish()
        elif encoding.rsplit(",", 1)[-1].strip() == "chunked":
            self._state = self._CHUNKED
            self._chunked = ChunkedDecoder()
        elif "content-length" in headers:
            try:
                self._remaining = int(headers["content-length"])
            except ValueError:
                raise HttpError("malformed_http", "bad Content-Length") from None
            if self._remaining < 0:
                raise HttpError("malformed_http", "bad Content-Length")
            self._state = self._LENGTH
            if not self._remaining:
                self._finish()
        else:
            self._state = self._UNTIL_CLOSE
            self.keep_alive = False
        if rest and self._state != self._DONE:
            self.feed(rest, now)
            self.received -= len(rest)  # counted once already

    def connection_closed(self) -> None:
        """The peer closed: that ends a close-framed body, and cuts any other short."""
        if self._state == self._UNTIL_CLOSE:
            self._finish()
        elif self._state != self._DONE:
            where = "before the response head" if self._state == self._HEAD else "mid-body"
            raise HttpError("stream_ended_early", f"connection closed {where}")

    def _finish(self) -> None:
        self._state = self._DONE
        self.finished = True
        self.sink.on_end()


def _parse_head(head: bytes) -> tuple[int, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise HttpError("malformed_http", f"bad status line {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise HttpError("malformed_http", f"bad header line {line[:80]!r}")
        name = name.strip().lower()
        value = value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return int(parts[1]), parts[0], headers


class HttpConnection(asyncio.Protocol):
    """One keep-alive connection; carries at most one exchange at a time."""

    def __init__(self, pool: ConnectionPool):
        self._pool = pool
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self._exchange: _Exchange | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._last_received = 0

    # asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # Small requests must leave at once, not wait for Nagle's delayed ACK.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.received(data, perf_counter())  # first thing: the arrival time of these bytes

    def received(self, data: bytes, now: float) -> None:
        """Bytes that arrived at ``now`` (``perf_counter`` clock)."""
        exchange = self._exchange
        if exchange is None:
            self.close()  # bytes nobody asked for: the connection is not trustworthy
            return
        try:
            exchange.feed(data, now)
        except HttpError as exc:
            self._fail(exc)
            return
        except Exception as exc:  # a sink bug must not kill the event loop's callback
            self._fail(HttpError("client_error", f"{type(exc).__name__}: {exc}"))
            return
        if exchange.finished:
            self._complete(exchange)

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost does the rest

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        exchange = self._exchange
        if exchange is None:
            return
        try:
            exchange.connection_closed()
        except HttpError as error:
            if exc is not None:
                error = HttpError(error.kind, f"{error} ({exc})")
            self._fail(error)
            return
        except Exception as error:
            self._fail(HttpError("client_error", f"{type(error).__name__}: {error}"))
            return
        self._complete(exchange)

    # exchanges --------------------------------------------------------------------------

    def start(self, data: bytes, sink: ResponseSink, timeout: float | None) -> asyncio.Future:
        """Writes a request; the future resolves when the response is complete."""
        future = self._loop.create_future()
        self._exchange = _Exchange(sink, future)
        if timeout is not None:
            self._timer = self._loop.call_later(timeout, self._on_timeout, timeout)
        self.transport.write(data)
        return future

    @property
    def response_bytes(self) -> int:
        """Bytes of response received for the current (or just ended) exchange."""
        exchange = self._exchange
        return exchange.received if exchange is not None else self._last_received

    def _on_timeout(self, timeout: float) -> None:
        self._timer = None
        self._fail(HttpError("timeout", f"no complete response within {timeout:g} s"))

    def _complete(self, exchange: _Exchange) -> None:
        self._clear()
        if not exchange.future.done():
            exchange.future.set_result(exchange.keep_alive)

    def _fail(self, error: HttpError) -> None:
        exchange = self._exchange
        self._clear()
        self.close()
        if exchange is not None and not exchange.future.done():
            exchange.future.set_exception(error)

    def _clear(self) -> None:
        if self._exchange is not None:
            self._last_received = self._exchange.received
        self._exchange = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class _WallClockOffset:
    """CLOCK_REALTIME minus CLOCK_MONOTONIC (ns), to put kernel stamps on ``perf_counter``'s
    clock. NTP slews both clocks alike, so only a step of the wall clock changes it: it is
    read again once a second. Each reading is the tightest of three pairs of monotonic reads
    around one wall-clock read, so a process preempted between two reads cannot skew it."""

    __slots__ = ("until", "value")

    def __init__(self) -> None:
        self.value = 0
        self.until = 0  # monotonic ns after which it is read again

    def refresh(self, now: int) -> None:
        best = None
        for _ in range(3):
            before = perf_counter_ns()
            wall = time_ns()
            after = perf_counter_ns()
            if best is None or after - before < best[0]:
                best = (after - before, wall - (before + after) // 2)
        self.value = best[1]
        self.until = now + 1_000_000_000


_WALL_OFFSET = _WallClockOffset()


class StampedSocket:
    """A plain TCP connection read with ``recvmsg``, so that every read comes with the
    kernel's arrival stamp of its bytes, converted to the ``perf_counter`` clock (Linux's
    CLOCK_MONOTONIC, shared by every process). Offers ``HttpConnection`` what it uses of an
    asyncio transport: ``write``, ``close``, ``is_closing``, ``get_extra_info("socket")``."""

    __slots__ = ("_closing", "_fd", "_loop", "_pending", "_protocol", "_received", "_sock")

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol):
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._received = protocol.received
        self._pending = bytearray()
        self._closing = False
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        loop.add_reader(self._fd, self._read_ready)

    def get_extra_info(self, name: str, default=None):
        return self._sock if name == "socket" else default

    def is_closing(self) -> bool:
        return self._closing

    def _read_ready(self) -> None:
        try:
            data, ancillary, _, _ = self._sock.recvmsg(_READ_SIZE, 64)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(exc)
            return
        mono = perf_counter_ns()
        stamp = mono
        if ancillary:
            level, kind, payload = ancillary[0]
            if kind == _SO_TIMESTAMPNS and level == socket.SOL_SOCKET and len(payload) == 16:
                seconds, nanos = _TIMESPEC.unpack(payload)
                if mono >= _WALL_OFFSET.until:
                    _WALL_OFFSET.refresh(mono)
                # Never later than now, whatever the wall clock did since the offset was read.
                stamp = min(mono, seconds * 1_000_000_000 + nanos - _WALL_OFFSET.value)
        if data:
            self._received(data, stamp / 1e9)
        else:
            self._protocol.eof_received()
            self._lose(None)

    def write(self, data: bytes) -> None:
        if self._closing:
            return
        if self._pending:
            self._pending += data
            return
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._lose(exc)
            return
        if sent < len(data):
            self._pending += data[sent:]
            self._loop.add_writer(self._fd, self._write_ready)

    def _write_ready(self) -> None:
        try:
            sent = self._sock.send(self._pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(exc)
            return
        del self._pending[:sent]
        if not self._pending:
            self._loop.remove_writer(self._fd)

    def close(self) -> None:
        """Closes at once (the client closes only connections it has done with); the
        protocol hears ``connection_lost`` on the next loop turn, as from asyncio's."""
        self._lose(None)

    abort = close  # asyncio's name for a close that drops what is not sent yet

    def _lose(self, exc: Exception | None) -> None:
        if self._closing:
            return
        self._closing = True
        self._loop.remove_reader(self._fd)
        if self._pending:
            self._loop.remove_writer(self._fd)
            self._pending.clear()
        self._sock.close()
        self._loop.call_soon(self._protocol.connection_lost, exc)


async def _open_stamped(loop, factory, host: str, port: int):
    """A ``StampedSocket`` connected to ``host`` (each of its addresses in turn) and its
    protocol, as ``loop.create_connection`` returns them."""
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    error: OSError = OSError(f"{host} has no address")
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:
            sock.close()
            raise
        protocol = factory()
        transport = StampedSocket(loop, sock, protocol)
        protocol.connection_made(transport)
        return transport, protocol
    raise error


async def _connect_pinned(
    loop, factory, origin: Origin, ssl: ssl_module.SSLContext | None, stamped: bool
):
    """A connection to ``origin``: to its ``addresses`` in turn when it has them (the host
    name only for TLS), else to its host. ``stamped``: plain TCP read with kernel stamps."""

    def connect(host: str, server_hostname: str | None = None):
        if stamped:
            return _open_stamped(loop, factory, host, origin.port)
        return loop.create_connection(
            factory, host, origin.port, ssl=ssl, server_hostname=server_hostname
        )

    if not origin.addresses:
        return await connect(origin.host)
    server_hostname = origin.host if ssl is not None else None
    for address in origin.addresses[:-1]:
        try:
            return await connect(address, server_hostname)
        except OSError:  # refused or unreachable: nothing was sent, the next may answer
            continue
    return await connect(origin.addresses[-1], server_hostname)


class ConnectionPool:
    """Keep-alive connections to one origin. Not thread-safe: one event loop."""

    def __init__(
        self,
        origin: Origin,
        *,
        connect_timeout: float = 10.0,
        ssl_context: ssl_module.SSLContext | None = None,
        kernel_stamps: bool | None = None,
    ):
        self.origin = origin
        self.connect_timeout = connect_timeout
        # Kernel arrival stamps need the raw socket: plain HTTP only (TLS decrypts first).
        # None: where the system has them (``KERNEL_STAMPS``, read now).
        stamps = KERNEL_STAMPS if kernel_stamps is None else kernel_stamps
        self.kernel_stamps = stamps and origin.scheme == "http"
        if origin.scheme == "https" and ssl_context is None:
            ssl_context = ssl_module.create_default_context()
        self._ssl = ssl_context if origin.scheme == "https" else None
        self._idle: list[HttpConnection] = []
        self.opened = 0

    async def _connect(self) -> HttpConnection:
        loop = asyncio.get_running_loop()
        factory: Callable[[], HttpConnection] = lambda: HttpConnection(self)  # noqa: E731
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, connection = await _connect_pinned(
                    loop, factory, self.origin, self._ssl, self.kernel_stamps
                )
        except ConnectionRefusedError:
            # Named in words: the errno's text differs between loops and connect calls.
            raise HttpError("connection_refused", f"{self._where()}: Connection refused") from None
        except TimeoutError:
            raise HttpError(
                "connect_timeout", f"{self._where()}: no connection in {self.connect_timeout:g} s"
            ) from None
        except (OSError, ssl_module.SSLError) as exc:
            raise HttpError("connection_error", f"{self._where()}: {exc}") from None
        self.opened += 1
        return connection

    def _where(self) -> str:
        return f"{self.origin.host}:{self.origin.port}"

    async def acquire(self) -> HttpConnection:
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed and not connection.transport.is_closing():
                connection.reused = True
                return connection
        return await self._connect()

    def release(self, connection: HttpConnection, keep_alive: bool) -> None:
        if keep_alive and not connection.closed:
            self._idle.append(connection)
        else:
            connection.close()

    async def warm(self, count: int) -> None:
        """Opens idle connections until ``count`` are ready (a level's concurrency), so the
        first requests of a level do not also measure TCP set-up."""
        self._idle = [c for c in self._idle if not c.closed and not c.transport.is_closing()]
        missing = count - len(self._idle)
        if missing > 0:
            opened = await asyncio.gather(*(self._connect() for _ in range(missing)))
            self._idle.extend(opened)

    def close(self) -> None:
        for connection in self._idle:
            connection.close()
        self._idle.clear()

    async def send(self, data: bytes, sink: ResponseSink, *, timeout: float | None = None) -> None:
        """Sends one request and waits for its complete response (delivered to ``sink``).

        Raises ``HttpError``. A reused connection that dies before a single response byte
        is the server's keep-alive timeout, not a failure: the request is sent once more.
        """
        for attempt in range(2):
            connection = await self.acquire()
            reused = connection.reused
            try:
                keep_alive = await connection.start(data, sink, timeout)
            except HttpError as error:
                retry = (
                    attempt == 0
                    and reused
                    and error.kind == "stream_ended_early"
                    and connection.response_bytes == 0
                )
                if not retry:
                    raise
                continue
            except asyncio.CancelledError:
                connection.close()
                raise
            self.release(connection, keep_alive)
            return


class BufferSink:
    """Collects a whole response (for small requests: metrics, model lists)."""

    def __init__(self, limit: int = 16 * 1024 * 1024):
        self.status = 0
        self.headers: dict[str, str] = {}
        self._parts: list[bytes] = []
        self._size = 0
        self._limit = limit

    def on_head(self, status: int, headers: dict[str, str]) -> None:
        self.status = status
        self.headers = headers

    def on_body(self, data: bytes, now: float) -> None:
        self._size += len(data)
        if self._size <= self._limit:
            self._parts.append(data)

    def on_end(self) -> None:
        pass

    @property
    def body(self) -> bytes:
        return b"".join(self._parts)


async def fetch(
    pool: ConnectionPool,
    path: str,
    *,
    method: str = "GET",
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> BufferSink:
    """One small request, whole response; raises ``HttpError``."""
    sink = BufferSink()
    request = build_request(pool.origin, method, path, body, headers or {})
    await pool.send(request, sink, timeout=timeout)
    return sink
