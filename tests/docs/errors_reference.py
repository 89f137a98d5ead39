"""Renders the error reference from the error table itself: `docs/errors.md` is its output.

Regenerate after changing `looping_core/a2a/_errors.py`'s table or an error's docstring:

    python tests/docs/errors_reference.py > docs/errors.md

`tests/docs/test_reference.py` fails while the page and the table differ.
"""

from __future__ import annotations

import inspect

from looping_core.a2a._errors import ERRORS  # the table itself (private: apps never need it)

HEADER = """# Errors

Every error the edge answers with, from the one table that decides them
(`looping_core/a2a/_errors.py`). On the JSON-RPC binding an error is a JSON-RPC error object
whose `data` holds a `google.rpc.ErrorInfo` (its `reason` and `domain` below; `-32602` adds
`google.rpc.BadRequest` field violations), sent with the HTTP status of the column "HTTP
(JSON-RPC)"; on the HTTP+JSON binding it is a `google.rpc.Status` body with the status and code
of the column "HTTP+JSON". A refused gateway token is `UNAUTHENTICATED`, with the name of the
check that refused it in `metadata.check` and in `WWW-Authenticate`: the checks and their names
are in [the zero-trust A2A edge](a2a-edge.md#gateway-tokens). Generated from
the code by `python tests/docs/errors_reference.py > docs/errors.md`.

| code | reason | domain | HTTP (JSON-RPC) | HTTP+JSON | standard message | when |
|---|---|---|---|---|---|---|
"""


def render() -> str:
    rows = []
    for error, spec in ERRORS.items():
        when = " ".join(inspect.cleandoc(error.__doc__ or "").split()).replace("|", "\\|")
        rows.append(
            f"| `{spec.code}` | `{spec.reason}` | `{spec.domain}` | {spec.http_status} |"
            f" {spec.rest[0]} `{spec.rest[1]}` | {spec.message} | {when} |"
        )
    return HEADER + "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(render(), end="")
