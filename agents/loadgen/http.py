"""A small HTTP/1.1 client over asyncio protocols, built for timing streamed responses.

Guarantees:

- Response bytes are handed to a ``ResponseSink`` together with the time they arrived, on the
  ``time.perf_counter()`` clock. Plain-HTTP connections on Linux read that time from the
  kernel, which stamps every segment as it reaches the socket (``SO_TIMESTAMPNS``,
  ``agents.loadgen.stamped_socket``): however many streams the event loop serves and however
  late it reads, the stamp is the arrival.
  Elsewhere (TLS, other systems) it is read in the transport's ``data_received`` callback,
  before any other work: no task wake-up sits between the socket and the timestamp.
- A request is written with one ``transport.write`` of pre-built bytes, which sends at once on
  an idle socket; building the bytes is the caller's job, before the clock starts.
- Bodies framed by ``Content-Length``, ``Transfer-Encoding: chunked`` or connection close are
  decoded; interim 1xx responses are skipped (``agents.loadgen.http_framing``). Connections
  are kept alive and reused (LIFO); a reused connection that the server had closed is
  retried once on a fresh one.
- Every failure surfaces as ``HttpError`` with a ``kind`` fit for counting
  (``connection_refused``, ``connect_timeout``, ``connection_error``, ``timeout``,
  ``stream_ended_early``, ``malformed_http``), never as a bare ``OSError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl as ssl_module
import sys
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter
from urllib.parse import urlsplit

from agents.loadgen.http_framing import Exchange, HttpError, ResponseSink
from agents.loadgen.stamped_socket import open_stamped

# Kernel receive stamps are Linux's (``agents.loadgen.stamped_socket``): where a pool reads
# plain HTTP with them unless told otherwise.
KERNEL_STAMPS = sys.platform == "linux"


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


class HttpConnection(asyncio.Protocol):
    """One keep-alive connection; carries at most one exchange at a time."""

    def __init__(self, pool: ConnectionPool):
        self._pool = pool
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self._exchange: Exchange | None = None
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
        self._exchange = Exchange(sink, future)
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

    def _complete(self, exchange: Exchange) -> None:
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


async def _connect_pinned(
    loop, factory, origin: Origin, ssl: ssl_module.SSLContext | None, stamped: bool
):
    """A connection to ``origin``: to its ``addresses`` in turn when it has them (the host
    name only for TLS), else to its host. ``stamped``: plain TCP read with kernel stamps."""

    def connect(host: str, server_hostname: str | None = None):
        if stamped:
            return open_stamped(loop, factory, host, origin.port)
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
