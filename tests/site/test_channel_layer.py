"""The channel layer the site is configured with carries messages (Redis in CI)."""

from __future__ import annotations

import pytest
from channels.layers import get_channel_layer
from django.conf import settings


@pytest.mark.needs_redis
async def test_it_round_trips_a_message_through_the_configured_redis_layer():
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.send(channel, {"type": "run.update", "seq": 7})
    assert await layer.receive(channel) == {"type": "run.update", "seq": 7}
    await layer.flush()


@pytest.mark.needs_redis
async def test_it_keeps_waiting_on_an_idle_channel_longer_than_redis_py_s_default_timeout():
    # redis-py 8 would abort the layer's blocking read after 5 s (channels_redis#422),
    # tearing down every quiet browser socket.
    import asyncio

    layer = get_channel_layer()
    channel = await layer.new_channel()

    async def late_send():
        await asyncio.sleep(6.5)
        await layer.send(channel, {"type": "late"})

    sender = asyncio.create_task(late_send())
    assert await asyncio.wait_for(layer.receive(channel), 15) == {"type": "late"}
    await sender
    await layer.flush()
