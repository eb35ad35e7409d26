"""A plain TCP connection read with the kernel's arrival stamp of every read (Linux).

Guarantee: the bytes of each read reach the protocol with the time the kernel stamped on the
latest segment they hold (``SO_TIMESTAMPNS``), put on the ``time.perf_counter()`` clock and
never later than the read itself: however many streams the event loop serves and however
late it reads, the stamp is the arrival.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from time import perf_counter_ns, time_ns

# Kernel receive stamps (Linux): the socket option and its control message share one number,
# the same on x86-64 and arm64 (the generic ABI); Python's socket module does not name it.
# A TCP read carries the stamp of the latest segment it consumed, in CLOCK_REALTIME.
_SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@qq")
# One read takes at most this much: a streamed response arrives in far smaller pieces, and a
# larger buffer costs an allocation of its size on every read.
_READ_SIZE = 64 * 1024


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


async def open_stamped(loop, factory, host: str, port: int):
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
