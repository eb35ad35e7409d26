"""Addresses a tenant chooses that the site's workers then call (notification webhooks, the
existing endpoints an experiment benchmarks).

Guarantee: ``outbound_url_problem`` refuses any URL that is not plain http(s) to a named host,
any whose host does not match the patterns a kind of address is limited to (``allowed_hosts``,
e.g. ``BENCHSITE_ENDPOINT_HOSTS``; None: any host), and any whose host resolves to a private,
loopback, link-local, multicast, reserved or unspecified address unless the operator allows
that host (``BENCHSITE_OUTBOUND_PRIVATE_HOSTS``, fnmatch patterns). It is checked when the
address is saved and again before every use, so a name that later resolves inward is refused
then too: a tenant cannot turn the workers into a scanner of the operator's network.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

from django.conf import settings


def _matches(host: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(host.lower(), pattern.lower()) for pattern in patterns)


def _allowed_private(host: str) -> bool:
    return _matches(host, settings.BENCHSITE_OUTBOUND_PRIVATE_HOSTS)


def _inward(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    return not ip.is_global or ip.is_multicast


def outbound_url_problem(
    url: str, *, allowed_hosts: Sequence[str] | None = None, allowed_setting: str = ""
) -> str | None:
    """Why the workers may not call ``url`` (None: they may); never raises. ``allowed_hosts``
    (fnmatch patterns, named by the setting ``allowed_setting``) limits the hosts further."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "Not a valid URL."
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "Give an http:// or https:// URL with a host name."
    if parts.username or parts.password:
        return "Put no user name or password in the URL."
    host = parts.hostname
    if allowed_hosts is not None and not _matches(host, allowed_hosts):
        return (
            f"The host {host!r} is not one the operator allows here ({allowed_setting or 'none'})."
        )
    if _allowed_private(host):
        return None
    try:
        addresses = {
            info[4][0] for info in socket.getaddrinfo(host, port or 443, proto=socket.IPPROTO_TCP)
        }
    except (OSError, UnicodeError):
        return f"The host {host!r} does not resolve."
    if any(_inward(address) for address in addresses):
        return (
            f"The host {host!r} is a private, loopback or link-local address; the operator "
            "allows such hosts only by name (BENCHSITE_OUTBOUND_PRIVATE_HOSTS)."
        )
    return None


def url_host(url: str) -> str:
    """What is shown of a stored URL: its host (and port), never its path or query."""
    parts = urlsplit(url)
    return parts.netloc.rsplit("@", 1)[-1]
