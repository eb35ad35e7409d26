"""A password hasher for browser tests: the stored hash must verify in the live server,
which runs with the project's real hashers."""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class FastPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    """Django's PBKDF2 (same algorithm name and format) with one iteration.

    The cast is created in the test process and signs in on Daphne, which has only the
    default hashers: PBKDF2 reads the iteration count from the stored hash, so this verifies
    there at once (and Daphne upgrades it on the first sign-in, as it would any old hash)."""

    iterations = 1
