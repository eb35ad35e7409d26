"""Reading the job an agent runs: a JSON file, or base64 JSON in ``BENCHSITE_JOB``.

Guarantees: a job that is not valid JSON, not base64, or not a valid ``JobSpec`` raises
``JobError`` whose message names the source and every bad field by path; the run token is read
from ``BENCHSITE_TOKEN`` only and never appears in an error.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from pathlib import Path

import pydantic

from agents.protocol import JOB_ENV, TOKEN_ENV, JobSpec, pydantic_field_errors


class JobError(ValueError):
    """The job cannot be used; the message says where and which field."""


def parse_job(data: object, *, source: str) -> JobSpec:
    """Validates parsed JSON as a ``JobSpec``."""
    try:
        return JobSpec.model_validate(data)
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"{error.field or 'job'}: {error.message}"
            for error in pydantic_field_errors(exc, model=JobSpec)
        )
        raise JobError(f"{source}: {problems}") from None


def load_job(path: Path | None, environ: dict[str, str] | None = None) -> JobSpec:
    """The job from ``path`` or, when ``path`` is None, from ``BENCHSITE_JOB``."""
    environ = os.environ if environ is None else environ
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise JobError(f"--job {path}: {exc.strerror or exc}") from None
        source = f"--job {path}"
    else:
        encoded = environ.get(JOB_ENV)
        if not encoded:
            raise JobError(f"no job: pass --job FILE or set {JOB_ENV} (base64 JSON)")
        try:
            text = base64.b64decode(encoded, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise JobError(f"{JOB_ENV}: not base64-encoded UTF-8 JSON") from None
        source = JOB_ENV
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise JobError(f"{source}: not JSON ({exc.msg} at line {exc.lineno})") from None
    return parse_job(data, source=source)


def run_token(environ: dict[str, str] | None = None) -> str | None:
    """The run token from ``BENCHSITE_TOKEN`` (None when unset or empty)."""
    environ = os.environ if environ is None else environ
    return environ.get(TOKEN_ENV) or None
