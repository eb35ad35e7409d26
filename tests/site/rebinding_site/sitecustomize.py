"""Installs the test's DNS rebinding (``tests/site/rebinding.py``) in a Python process that
has this folder on its PYTHONPATH and ``BENCHSITE_TEST_REBIND`` set; nothing otherwise."""

import os
import sys
from pathlib import Path

if os.environ.get("BENCHSITE_TEST_REBIND"):
    # Site start-up comes before the working folder is on the path: add the checkout.
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from tests.site.rebinding import install_from_env

    install_from_env()
