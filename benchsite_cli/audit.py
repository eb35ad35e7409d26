"""``benchsite audit export``: the audit log as CSV or JSON, to stdout or a file.

Guarantees: a file is written whole or not at all (a half-downloaded log never takes the
file's name).
"""

from __future__ import annotations

import sys

from benchsite_cli import EXIT_OK
from benchsite_cli.client import ApiClient, CliError
from benchsite_cli.output import err


def audit_export(api: ApiClient, args) -> int:
    params = {"as": args.format}
    params.update({k: v for k, v in (("event", args.event), ("since", args.since)) if v})
    if args.out is None:
        api.stream_to("audit/export/", params, lambda chunk: sys.stdout.write(chunk.decode()))
        return EXIT_OK
    partial = args.out.with_name(args.out.name + ".part")
    try:
        with partial.open("wb") as file:
            api.stream_to("audit/export/", params, file.write)
    except OSError as exc:
        raise CliError(f"cannot write {args.out}: {exc.strerror}") from None
    except CliError:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(args.out)  # a half-downloaded log never takes the file's name
    err(f"wrote {args.out}")
    return EXIT_OK
