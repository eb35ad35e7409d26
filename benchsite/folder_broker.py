"""A Celery broker in a folder, for installations without Redis (``DEBUG`` only: the demo).

kombu's filesystem transport, with two guarantees it lacks on its own:
- a message is only ever seen whole: it is written under a name no consumer reads and then
  renamed into place (kombu names the file first and writes it after, so a consumer listing
  the folder in between takes an empty message and loses the task);
- the folders exist: they are made on first use.

Every process of the installation that names the same folder shares the queues: the demo's
web server (Daphne, a child process) enqueues and its embedded worker takes the tasks.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    """kombu's filesystem channel, publishing atomically (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for folder in (self.data_folder_out, self.data_folder_in, self.control_folder):
            Path(folder).mkdir(parents=True, exist_ok=True)

    def _put(self, queue, payload, **kwargs):
        # The name kombu gives (time first, so the folder sorts in order of arrival); the
        # consumer takes only names that end in ".<queue>.msg".
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = f"{final}.partial"
        try:
            with open(partial, "wb") as file:
                file.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    """The transport Celery is given (``CELERY_BROKER_TRANSPORT``)."""

    Channel = Channel
