"""Encryption at rest for the secrets the site must read back (provider API keys).

Guarantees: ``encrypt_secret`` returns a Fernet token (AES-128-CBC + HMAC-SHA256, with a
timestamp) under the first key of ``settings.CREDENTIALS_ENCRYPTION_KEY``; ``decrypt_secret``
accepts a token made under any of its keys, and otherwise raises ``SecretUnreadable``, whose
message names the setting and never holds the token or the plaintext.
"""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


class SecretUnreadable(RuntimeError):
    """A stored secret cannot be decrypted with the configured keys."""


def _fernet() -> MultiFernet:
    # Built per call: cheap, and a changed setting (tests, rotation) takes effect at once.
    keys = settings.CREDENTIALS_ENCRYPTION_KEY.split(",")
    return MultiFernet([Fernet(key.strip()) for key in keys])


def encrypt_secret(plaintext: str) -> str:
    """The ciphertext of ``plaintext``, as ASCII text fit for a TextField."""
    return _fernet().encrypt(plaintext.encode()).decode("ascii")


def decrypt_secret(ciphertext: str) -> str:
    """The plaintext back, or ``SecretUnreadable`` when no configured key made it."""
    try:
        return _fernet().decrypt(ciphertext.encode("ascii")).decode()
    except (InvalidToken, UnicodeError, ValueError):
        raise SecretUnreadable(
            "A stored secret cannot be decrypted: CREDENTIALS_ENCRYPTION_KEY has changed since "
            "it was saved. Restore the previous key (list it after the new one, "
            "comma-separated, to rotate) or set the secret again."
        ) from None
