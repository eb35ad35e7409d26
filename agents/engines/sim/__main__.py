"""``python -m agents.engines.sim``: run the simulator's server (see ``server.main``)."""

import sys

from agents.engines.sim.server import main

sys.exit(main())
