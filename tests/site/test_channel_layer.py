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
