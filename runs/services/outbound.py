"""Addresses a tenant chooses that the site's workers then call (notification webhooks, the
existing endpoints an experiment benchmarks), and the only way to call them.

Guarantees:

- ``outbound_target`` refuses (``OutboundRefused``, in words for the person who gave the
  URL) any URL that is not plain http(s) to a named host, any with a user or password, any
  whose host does not match the patterns a kind of address is limited to (``allowed_hosts``,
  e.g. ``BENCHSITE_ENDPOINT_HOSTS``; None: any host), and any whose host resolves to a
  private, loopback, link-local, multicast, reserved or unspecified address unless the
  operator allows that host by name (``BENCHSITE_OUTBOUND_PRIVATE_HOSTS``, fnmatch patterns),
  or it is the demo's own receiver (``BENCHSITE_DEMO_RECEIVER_URL``, unset but in ``manage.py
  demo_run``): exactly its scheme, 127.0.0.1 and port, resolving to loopback only.
- The host is resolved once per target, and the target carries the address that was
  checked: ``outbound_request`` connects to that address only, with the URL's host name as
  the Host header and the TLS server name (so certificates are verified against the name).
  A name that answers differently to a second lookup (DNS rebinding) is never asked again.
- Redirects are never followed, and no proxy from the environment is used: nothing else
  decides where a request goes (CA certificates from ``SSL_CERT_FILE`` still are).
- A receiver's answer costs the workers a few kilobytes at most: its body is read only
  through ``outbound_body``, to a limit (``MAX_RESPONSE_BYTES`` unless the caller names a
  larger one), within the request's timeout in all, and never decompressed; the rest is
  never taken in (the connection is closed).
- Callers check a URL when it is saved and take a fresh target before every use, so a name
  that later resolves inward is refused then too: a tenant cannot turn the workers into a
  scanner of the operator's network.
"""

from __future__ import annotations

import contextlib
import fnmatch
import ipaddress
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
from django.conf import settings

MAX_RESPONSE_BYTES = 4 * 1024


class OutboundRefused(Exception):
    """Why the workers may not call a URL, in words for the person who gave it."""


@dataclass(frozen=True)
class OutboundTarget:
    """A URL whose host was resolved once and checked: requests go to ``addresses`` only."""

    url: str
    host: str
    addresses: tuple[str, ...]  # in the resolver's order, each one checked


def _matches(host: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(host.lower(), pattern.lower()) for pattern in patterns)


def _allowed_private(host: str) -> bool:
    return _matches(host, settings.BENCHSITE_OUTBOUND_PRIVATE_HOSTS)


def _demo_receiver(scheme: str, host: str, port: int | None) -> bool:
    """Whether this is the demo's own receiver: its scheme, host and port exactly."""
    receiver = settings.BENCHSITE_DEMO_RECEIVER_URL
    if not receiver:
        return False
    ours = urlsplit(receiver)
    return (scheme, host, port) == (ours.scheme, ours.hostname, ours.port)


def _loopback(address: str) -> bool:
    return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback


def _inward(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    return not ip.is_global or ip.is_multicast


def outbound_target(
    url: str, *, allowed_hosts: Sequence[str] | None = None, allowed_setting: str = ""
) -> OutboundTarget:
    """``url`` resolved and checked (see the module docstring); raises ``OutboundRefused``.
    ``allowed_hosts`` (fnmatch patterns, named by the setting ``allowed_setting``) limits
    the hosts further."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise OutboundRefused("Not a valid URL.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise OutboundRefused("Give an http:// or https:// URL with a host name.")
    if parts.username or parts.password:
        raise OutboundRefused("Put no user name or password in the URL.")
    host = parts.hostname
    if allowed_hosts is not None and not _matches(host, allowed_hosts):
        raise OutboundRefused(
            f"The host {host!r} is not one the operator allows here ({allowed_setting or 'none'})."
        )
    try:
        infos = socket.getaddrinfo(host, port or 443, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        raise OutboundRefused(f"The host {host!r} does not resolve.") from None
    # Scope ids ("%eth0") go: the address is put in a URL, and only inward ones carry them.
    addresses = tuple(dict.fromkeys(info[4][0].split("%", 1)[0] for info in infos))
    if not addresses:
        raise OutboundRefused(f"The host {host!r} does not resolve.")
    # Every answer is checked, not only the one connected to: a name is wholly outward or
    # the operator's.
    demo = _demo_receiver(parts.scheme, host, port) and all(map(_loopback, addresses))
    if not demo and not _allowed_private(host) and any(_inward(address) for address in addresses):
        raise OutboundRefused(
            f"The host {host!r} is a private, loopback or link-local address; the operator "
            "allows such hosts only by name (BENCHSITE_OUTBOUND_PRIVATE_HOSTS)."
        )
    return OutboundTarget(url=url, host=host, addresses=addresses)


def outbound_url_problem(
    url: str, *, allowed_hosts: Sequence[str] | None = None, allowed_setting: str = ""
) -> str | None:
    """Why the workers may not call ``url`` (None: they may); never raises."""
    try:
        outbound_target(url, allowed_hosts=allowed_hosts, allowed_setting=allowed_setting)
    except OutboundRefused as refused:
        return str(refused)
    return None


@contextlib.contextmanager
def outbound_request(
    target: OutboundTarget,
    method: str,
    *,
    path: str = "",
    headers: dict[str, str],
    content: bytes | None = None,
    timeout: float,
) -> Iterator[httpx.Response]:
    """The response to ``method`` on ``target``'s URL (plus ``path``), its body not yet read
    (read what you need of it); sent to the checked addresses only, the next one tried when
    one cannot be connected to, as a client does with a name's answers (see the module
    docstring). Raises ``httpx.HTTPError`` as httpx does."""
    url = httpx.URL(target.url + path)
    # httpx would take both from the URL, which names an address now: keep the host's.
    # Bodies are read raw (``outbound_body``): a compressed one is asked for by nobody.
    headers = {**headers, "Host": url.netloc.decode("ascii"), "Accept-Encoding": "identity"}
    extensions = {"sni_hostname": url.raw_host.decode("ascii")}
    # A transport of our own: httpx then takes no proxy from the environment.
    with httpx.Client(
        transport=httpx.HTTPTransport(), follow_redirects=False, timeout=timeout
    ) as client:
        last = len(target.addresses) - 1
        for index, address in enumerate(target.addresses):
            request = client.build_request(
                method,
                url.copy_with(host=address),
                headers=headers,
                content=content,
                extensions=extensions,
            )
            try:
                response = client.send(request, stream=True)
            except httpx.ConnectError:  # nothing was sent: the next address may answer
                if index == last:
                    raise
                continue
            try:
                yield response
            finally:
                response.close()
            return


@dataclass(frozen=True)
class OutboundBody:
    """What was read of a response's body: ``content``, and whether that is all of it (False:
    the body is longer than the limit)."""

    content: bytes
    complete: bool


def outbound_body(
    response: httpx.Response, *, limit: int = MAX_RESPONSE_BYTES, timeout: float
) -> OutboundBody:
    """At most ``limit`` bytes of ``response``'s body (from ``outbound_request``); the
    caller's ``with`` then closes the connection on the rest. Raises ``httpx.HTTPError`` as
    httpx does, and ``httpx.ReadTimeout`` when the body takes over ``timeout`` seconds in all
    (a receiver sending a byte now and then holds a worker no longer)."""
    # Raw bytes: decoding a gzip or brotli body could turn one network read into megabytes.
    deadline = time.monotonic() + timeout
    content = bytearray()
    for chunk in response.iter_raw():
        content += chunk
        if len(content) > limit:
            return OutboundBody(bytes(content[:limit]), complete=False)
        if time.monotonic() > deadline:
            raise httpx.ReadTimeout("the body took too long", request=response.request)
    return OutboundBody(bytes(content), complete=True)


def url_host(url: str) -> str:
    """What is shown of a stored URL: its host (and port), never its path or query."""
    parts = urlsplit(url)
    return parts.netloc.rsplit("@", 1)[-1]
