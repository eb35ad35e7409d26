"""The channel layer the site is configured with carries messages (Redis in CI)."""

from __future__ import annotations

import copy
import uuid

import pytest
from channels.layers import get_channel_layer
from django.conf import settings as django_settings


@pytest.fixture
async def layer(settings):
    """The configured layer under a key prefix of this test's own, flushed afterwards.

    Other test runs share the Redis: a flush() under the site's prefix would delete the
    groups of their live servers too, and their pages would stop hearing of their runs."""
    layers = copy.deepcopy(settings.CHANNEL_LAYERS)
    layers["default"].setdefault("CONFIG", {})["prefix"] = f"benchsite-test-{uuid.uuid4().hex}"
    settings.CHANNEL_LAYERS = layers
    layer = get_channel_layer()
    yield layer
    await layer.flush()


@pytest.mark.needs_redis
async def test_it_round_trips_a_message_through_the_configured_redis_layer(layer):
    assert django_settings.CHANNEL_LAYERS["default"]["BACKEND"] == (
        "channels_redis.core.RedisChannelLayer"
    )
    channel = await layer.new_channel()
    await layer.send(channel, {"type": "run.update", "seq": 7})
    assert await layer.receive(channel) == {"type": "run.update", "seq": 7}


@pytest.mark.needs_redis
@pytest.mark.slow
async def test_it_keeps_waiting_on_an_idle_channel_longer_than_redis_py_s_default_timeout(layer):
    # redis-py 8 would abort the layer's blocking read after 5 s (channels_redis#422),
    # tearing down every quiet browser socket.
    import asyncio

    channel = await layer.new_channel()

    async def late_send():
        await asyncio.sleep(6.5)
        await layer.send(channel, {"type": "late"})

    sender = asyncio.create_task(late_send())
    assert await asyncio.wait_for(layer.receive(channel), 15) == {"type": "late"}
    await sender
