"""``python -m benchsite_cli`` is the ``benchsite`` console script."""

import sys

from benchsite_cli.main import main

sys.exit(main())
