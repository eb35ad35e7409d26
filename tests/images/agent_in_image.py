"""The local provider's agent command in tests/images: the agent image's own entrypoint
(``benchsite-agent run``) in a working container of that image, as a pod runs it.

    BENCHSITE_LOCAL_AGENT_COMMAND="python tests/images/agent_in_image.py CONTAINER"

The provider hands its agent the pod's environment and ``--workdir FOLDER``: the pod's
variables (``AGENT_POD_ENV``) and the agent's host settings (``AGENT_HOST_SETTINGS``) are
passed into the container by name, nothing else of this process's environment (its PATH and
Python are the host's, not the image's); the pod's folder is mounted at the same path, so
what the agent writes there is where the provider looks; the site is reached over the host's
network, as ``buildah run`` shares it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agents.protocol.host_env import AGENT_HOST_SETTINGS, AGENT_POD_ENV  # noqa: E402

BH = str(ROOT / "scripts" / "images" / "bh")


def main() -> None:
    container, *args = sys.argv[1:]
    pod_folder = Path(args[args.index("--workdir") + 1]).parent
    shown = subprocess.run(
        [BH, "inspect", "--type", "container", container],
        capture_output=True,
        text=True,
        check=True,
    )
    entrypoint = json.loads(shown.stdout)["OCIv1"]["config"]["Entrypoint"]
    env = [
        f"--env={name}={os.environ[name]}"
        for name in (*AGENT_POD_ENV, *AGENT_HOST_SETTINGS)
        if name in os.environ
    ]
    volume = f"--volume={pod_folder}:{pod_folder}"
    os.execv(BH, [BH, "run", volume, *env, container, "--", *entrypoint, *args])


if __name__ == "__main__":
    main()
