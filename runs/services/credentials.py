"""An organization's secrets for outside services (the Runpod API key, the Hugging Face
token): set, clear, and read back for a run.

Guarantees: the key is stored only as ciphertext (runs/secrets.py); the audit log, error
messages and return values carry its fingerprint (the last four characters) and never the
key or the ciphertext; each change and its audit event are written in one transaction; a
refused key leaves whatever was stored before untouched. The Runpod key is neither cleared
nor replaced by another while a pod rented with it is not released (``Conflict`` naming the
runs): only that key can terminate it. Setting a key where none is stored, or where the
stored one cannot be decrypted, is always allowed: it is how such pods are reached again.
"""

from __future__ import annotations

import string

from django.db import transaction
from django.utils import timezone

from runs.actors import Actor
from runs.audit import audit_record
from runs.errors import Conflict, DomainValidationError
from runs.models import CredentialProvider, Organization, ProviderCredential
from runs.providers.base import PermanentProviderError
from runs.secrets import SecretUnreadable, decrypt_secret, encrypt_secret
from runs.services.runpod_holds import runs_holding_runpod_pods

API_KEY_MAX_LENGTH = 200
# Printable ASCII without whitespace: what provider keys are made of, and nothing that could
# break out of an HTTP header.
_KEY_CHARACTERS = frozenset(string.ascii_letters + string.digits + string.punctuation)
# Shorter keys show no characters at all: four of a short key would give too much away.
_FINGERPRINT_MIN_LENGTH = 16


# A Hugging Face token travels to the pod as an environment value, where a quote could break
# out of the provider's query: only what the hub's tokens are made of.
_HF_TOKEN_CHARACTERS = frozenset(string.ascii_letters + string.digits + "_-")
# How many of the runs holding a Runpod key a refusal names.
_HOLDING_RUNS_SHOWN = 5
# Audit events per service: (set, clear).
_EVENTS = {
    CredentialProvider.RUNPOD: ("provider_key.set", "provider_key.clear"),
    CredentialProvider.HUGGINGFACE: ("hf_token.set", "hf_token.remove"),
}


def _check_api_key(api_key: str, provider: CredentialProvider) -> None:
    # Messages describe the rule, never the value: the value is a secret.
    if not api_key:
        message = "Must not be empty."
    elif len(api_key) > API_KEY_MAX_LENGTH:
        message = f"Must be at most {API_KEY_MAX_LENGTH} characters."
    elif not set(api_key) <= _KEY_CHARACTERS:
        message = "Must be printable ASCII without spaces, tabs or line breaks."
    elif provider == CredentialProvider.HUGGINGFACE and not set(api_key) <= _HF_TOKEN_CHARACTERS:
        message = "A Hugging Face token is letters, digits, '_' and '-' only (hf_…)."
    else:
        return
    raise DomainValidationError.single("api_key", message)


def key_fingerprint(api_key: str) -> str:
    """What may be shown of a key: "…" and its last four characters."""
    return "…" + (api_key[-4:] if len(api_key) >= _FINGERPRINT_MIN_LENGTH else "")


def _refuse_while_pods_are_held(org: Organization, change: str) -> None:
    """Raises ``Conflict`` naming the runs when ``org`` holds an unreleased Runpod pod: a key
    cleared or replaced under it leaves the pod rented, billed and out of reach."""
    held = list(
        runs_holding_runpod_pods()
        .filter(organization=org)
        .order_by("created_at")
        .values_list("id", "pod_id")[: _HOLDING_RUNS_SHOWN + 1]
    )
    if not held:
        return
    named = ", ".join(
        f"run {run_id}" + (f" (pod {pod_id})" if pod_id else "")
        for run_id, pod_id in held[:_HOLDING_RUNS_SHOWN]
    )
    more = " and more" if len(held) > _HOLDING_RUNS_SHOWN else ""
    raise Conflict(
        f"The Runpod key cannot be {change} while pods rented with it are not released: "
        f"{named}{more}. Cancel these runs and wait until their pods are released."
    )


def _stored_key(credential: ProviderCredential) -> str | None:
    """The stored key in clear, None when it cannot be decrypted (never shown anywhere)."""
    try:
        return decrypt_secret(credential.encrypted_key)
    except SecretUnreadable:
        return None


@transaction.atomic
def provider_key_set(
    *, actor: Actor, org: Organization, provider: str, api_key: str
) -> ProviderCredential:
    """Stores (or replaces) the organization's key for ``provider``, encrypted; audited as
    ``provider_key.set`` (``hf_token.set`` for the Hugging Face token). Raises ``Conflict``
    when it would replace a readable Runpod key that unreleased pods hold by another."""
    provider = CredentialProvider(provider)
    _check_api_key(api_key, provider)
    fingerprint = key_fingerprint(api_key)
    credential = (
        ProviderCredential.objects.select_for_update()
        .filter(organization=org, provider=provider)
        .first()
    )
    before = None
    # The same key again (re-saved after a rotation of the encryption key) replaces nothing.
    replaces = credential is not None and _stored_key(credential) not in (None, api_key)
    if provider == CredentialProvider.RUNPOD and replaces:
        _refuse_while_pods_are_held(org, "replaced")
    if credential is None:
        credential = ProviderCredential(organization=org, provider=provider, created_by=actor.user)
    else:
        before = {"provider": provider.value, "fingerprint": credential.fingerprint}
    credential.encrypted_key = encrypt_secret(api_key)
    credential.fingerprint = fingerprint
    credential.updated_at = timezone.now()
    credential.save()
    audit_record(
        org=org,
        actor=actor,
        event=_EVENTS[provider][0],
        target=credential,
        before=before,
        after={"provider": provider.value, "fingerprint": fingerprint},
    )
    return credential


@transaction.atomic
def provider_key_clear(*, actor: Actor, org: Organization, provider: str) -> None:
    """Forgets the organization's key for ``provider``; clearing none is a no-op. Audited as
    ``provider_key.clear`` (``hf_token.remove`` for the Hugging Face token). Raises
    ``Conflict`` for a Runpod key that unreleased pods hold."""
    provider = CredentialProvider(provider)
    credential = (
        ProviderCredential.objects.select_for_update()
        .filter(organization=org, provider=provider)
        .first()
    )
    if credential is None:
        return
    if provider == CredentialProvider.RUNPOD:
        _refuse_while_pods_are_held(org, "cleared")
    audit_record(
        org=org,
        actor=actor,
        event=_EVENTS[provider][1],
        target=credential,
        before={"provider": provider.value, "fingerprint": credential.fingerprint},
    )
    credential.delete()


def provider_key_for_run(
    org: Organization, provider: str = CredentialProvider.RUNPOD
) -> str | None:
    """The organization's own key for ``provider`` in clear, or None when it has none.

    Only a provider adapter acting for this organization (or, for the Hugging Face token, the
    environment of this organization's pod) may hold the result, and only for the calls it
    makes; a key that cannot be decrypted raises ``PermanentProviderError`` (the run fails
    with the reason).
    """
    credential = ProviderCredential.objects.filter(organization=org, provider=provider).first()
    if credential is None:
        return None
    try:
        return decrypt_secret(credential.encrypted_key)
    except SecretUnreadable:
        raise PermanentProviderError(
            f"The organization's {CredentialProvider(provider).label} key "
            f"({credential.fingerprint}) cannot be decrypted: CREDENTIALS_ENCRYPTION_KEY has "
            "changed since it was saved. Restore the previous key, or set the API key again."
        ) from None
