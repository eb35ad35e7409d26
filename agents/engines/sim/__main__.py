"""``python -m agents.engines.sim``: run the simulator's server (see ``command.main``)."""

import sys

from agents.engines.sim.command import main

sys.exit(main())
