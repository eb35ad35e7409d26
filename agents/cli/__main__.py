"""``python -m agents.cli``: the agent's command line (see ``agents.cli.main``)."""

import sys

from agents.cli import main

sys.exit(main())
