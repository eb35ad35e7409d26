"""How messages travel between agent and site: the routes, the socket's close codes and the
REST batch (``BatchRequest`` and ``BatchAnswer``). Both sides build and read them from here,
so a route, a code or a field is spelled once.

Guarantees:

- Route templates are relative to the site's root (sockets, the API base ``API_BASE_ROUTE``)
  or to its API base (REST), with ``{run_id}`` (and ``{dataset_id}``) to fill in; the site
  declares its URL patterns from the same templates, and hands an agent the URLs of
  ``agent_site_urls``.
- ``CloseCode`` values lie in 4000-4999, the range an application may close a WebSocket with
  (Daphne raises on anything else).
- A site accepts every batch of at most ``MAX_BATCH_MESSAGES`` messages and ``MAX_BATCH_BYTES``
  bytes; one message larger than that travels alone.
- A socket opened with ``BATCH_SUBPROTOCOL`` may carry an array frame: a JSON array of agent
  messages within the same limits, answered with one frame, a JSON array of the replies
  (``ack`` or ``rejected``) in the array's order. A site that does not offer it accepts the
  socket without a subprotocol, and the agent sends one message per frame.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any
from uuid import UUID

from pydantic import Field

from agents.protocol.fields import SeqNumber
from agents.protocol.messages import Cancel
from agents.protocol.strict import StrictModel

# The REST batch and the socket's array frame: an agent never puts more messages, or more
# bytes of JSON, into one request or frame, and a site accepts every batch within both (its
# request body and frame limits are at least ``MAX_BATCH_BYTES``).
MAX_BATCH_MESSAGES = 1000
MAX_BATCH_BYTES = 4 * 1024 * 1024

# The WebSocket subprotocol an agent asks for, and a site accepts, to send many messages per
# frame (module docstring): per-frame costs (framing, dispatch, the reply) are what limit how
# many messages a web process stores per second.
BATCH_SUBPROTOCOL = "benchsite.batch.1"

# Below the site's root: the REST API's base and the agent's ingest socket.
API_BASE_ROUTE = "api/v1/"
AGENT_SOCKET_ROUTE = "ws/agent/runs/{run_id}/"
# Below the site's API base.
AGENT_MESSAGES_ROUTE = "agent/runs/{run_id}/messages/"
AGENT_JOB_ROUTE = "agent/runs/{run_id}/job/"
AGENT_EPOCH_ROUTE = "agent/runs/{run_id}/epoch/"
AGENT_DATASET_ROUTE = "agent/runs/{run_id}/datasets/{dataset_id}/"
AGENT_EVALUATION_SET_ROUTE = "agent/runs/{run_id}/evaluation-sets/{set_id}/"


def agent_route(base: str, route: str, **parts: str | UUID) -> str:
    """``route`` filled in with ``parts`` below ``base`` (a site root or an API base, with or
    without its trailing slash): ``agent_route(rest_url, AGENT_EPOCH_ROUTE, run_id=…)``."""
    return base.rstrip("/") + "/" + route.format(**{k: str(v) for k, v in parts.items()})


def agent_site_urls(site_root: str, *, run_id: str | UUID) -> tuple[str, str]:
    """The run's socket URL and the REST API base an agent reports to, on the site at
    ``site_root`` (``http://…`` or ``https://…``, with or without its trailing slash): the
    socket's scheme is ``ws``/``wss`` to match; both end in a slash, as ``JobSpec`` holds them."""
    socket_root = (
        "ws" + site_root.removeprefix("http") if site_root.startswith("http") else site_root
    )
    return (
        agent_route(socket_root, AGENT_SOCKET_ROUTE, run_id=run_id),
        agent_route(site_root, API_BASE_ROUTE),
    )


class CloseCode(enum.IntEnum):
    """Why the site closed an agent's (or a browser's) socket."""

    # No such run, not yours, or the run has ended: the same code for all, so a socket tells
    # a stranger nothing. An agent takes it as "this token is done here".
    NOT_FOUND = 4404
    # The site failed to store what it received: nothing unacknowledged is lost, reconnect
    # and resend. (Not WebSocket's own 1011, which Daphne does not let an application send.)
    INTERNAL_ERROR = 4500


class BatchRequest(StrictModel):
    """Agent → site (``POST AGENT_MESSAGES_ROUTE``): messages the socket could not deliver.
    Each is an ``AgentMessage`` that the site parses on its own, so one bad message is
    refused alone; the batch as a whole only has to be a list within the limit."""

    messages: list[Any] = Field(max_length=MAX_BATCH_MESSAGES)


def array_frame(message_texts: list[str]) -> str:
    """A JSON array of messages that are JSON already (as the agent spools them), spliced
    rather than decoded and encoded again: a socket's array frame (``BATCH_SUBPROTOCOL``)."""
    return "[" + ",".join(message_texts) + "]"


def batch_request_body(message_texts: list[str]) -> bytes:
    """The JSON of ``BatchRequest(messages=…)`` from messages that are JSON already, spliced
    as ``array_frame`` splices them."""
    return ('{"messages":' + array_frame(message_texts) + "}").encode("utf-8")


class BatchRefusal(StrictModel):
    """One refused message of a batch: its place in the batch, its ``seq`` when the site could
    read one, and why. The site will never store it."""

    index: Annotated[int, Field(ge=0, lt=MAX_BATCH_MESSAGES)]
    seq: SeqNumber | None = None
    reason: str


class BatchAnswer(StrictModel):
    """Site → agent: the answer to one ``BatchRequest``. ``acked`` are stored (or were
    already), ``rejected`` never will be, in batch order; ``cancel`` is the run's stop request
    (None while there is none)."""

    acked: list[SeqNumber]
    rejected: list[BatchRefusal]
    cancel: Cancel | None = None
