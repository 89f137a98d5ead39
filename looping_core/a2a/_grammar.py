"""What a value must be before the edge accepts it: the rules the store, the push client and the
codec will apply later, checked at the door so a client's mistake is refused there (-32602 naming
the field) and never surfaces later as a failed write, a stuck push or a crashed turn.

- Every JSON value: nested at most `MAX_DEPTH` levels, well-formed Unicode (no lone surrogate,
  in keys too), finite numbers, integers within ±(2**53 - 1) (I-JSON, RFC 7493: larger ones
  are not the same number in every JSON reader; send them as strings).
- Ids (`messageId`, `contextId`, task and push-config ids): at most `MAX_ID_CHARS`, no control
  characters.
- Push URLs: absolute http(s), printable ASCII only (percent-encode the rest), no userinfo or
  fragment, at most `MAX_URL_CHARS`.
- Values that become HTTP headers (push `token`, `authentication.credentials`): printable ASCII
  and spaces, at most `MAX_HEADER_CHARS`; an authentication scheme is an HTTP token.

Each function returns problems instead of raising, so the edge can name the field and the store
and the push deliverer can fail a row written by an earlier release instead of retrying it.
Messages never echo the offending value.
"""

from __future__ import annotations

import math
import re
from typing import Any

from looping_core._origins import origin_of

__all__ = [
    "MAX_DEPTH",
    "MAX_HEADER_CHARS",
    "MAX_ID_CHARS",
    "MAX_SAFE_INTEGER",
    "MAX_URL_CHARS",
    "auth_scheme_problem",
    "header_value_problem",
    "id_problem",
    "is_well_formed",
    "json_problem",
    "printable",
    "push_target_problems",
    "undeliverable_reason",
    "url_problem",
]

MAX_DEPTH = 64
"""Containers nested deeper than this are refused (a request's own structure needs about 6)."""
MAX_SAFE_INTEGER = 2**53 - 1
MAX_ID_CHARS = 256
MAX_URL_CHARS = 2048
MAX_HEADER_CHARS = 8192

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_URL_CHARS = re.compile(r"[\x21-\x7e]+")
_HEADER_CHARS = re.compile(r"[\x20-\x7e]*")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")

_SURROGATE = "text holds a lone surrogate (not well-formed Unicode)"


def is_well_formed(text: str) -> bool:
    """Whether `text` can be encoded as UTF-8 (it holds no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable(text: str) -> str:
    """`text` with lone surrogates escaped, for a log line or a column that must take it."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def json_problem(value: Any, path: str = "") -> tuple[str, str] | None:
    """The first problem in a parsed JSON value, as (field path, problem), or `None`.

    Iterative, so a document nested deeper than the interpreter's recursion limit is reported,
    not crashed on. Paths look like `message.parts[0].data.key`. The common case, a document
    without a problem, is one quick walk that builds no paths.
    """
    if _is_clean(value):
        return None
    return _locate(value, path)


def _is_clean(value: Any) -> bool:
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is str:
            if not item.isascii() and not is_well_formed(item):
                return False
        elif kind is dict:
            if depth >= MAX_DEPTH:
                return False
            for key, child in item.items():
                if not key.isascii() and not is_well_formed(key):
                    return False
                stack.append((child, depth + 1))
        elif kind is list:
            if depth >= MAX_DEPTH:
                return False
            stack.extend((child, depth + 1) for child in item)
        elif kind is int:
            if not -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                return False
        elif kind is float and not math.isfinite(item):
            return False
    return True


def _locate(value: Any, path: str) -> tuple[str, str] | None:
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, str):
            if not is_well_formed(item):
                return where, _SURROGATE
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if abs(item) > MAX_SAFE_INTEGER:
                return where, "integer beyond ±(2^53 - 1) (I-JSON); send it as a string"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return where, "numbers must be finite"
        elif isinstance(item, dict | list):
            if depth >= MAX_DEPTH:
                return where, f"nested deeper than {MAX_DEPTH} levels"
            if isinstance(item, dict):
                for key, child in item.items():
                    if not is_well_formed(key):
                        return where, "an object key holds a lone surrogate"
                    stack.append((child, f"{where}.{key}" if where else key, depth + 1))
            else:
                stack.extend(
                    (child, f"{where}[{index}]", depth + 1) for index, child in enumerate(item)
                )
    return None


def id_problem(value: str, *, required: bool = False) -> str | None:
    """Why `value` cannot be an id, or `None`."""
    if not value:
        return "must not be empty" if required else None
    if len(value) > MAX_ID_CHARS:
        return f"longer than {MAX_ID_CHARS} characters"
    if _CONTROL.search(value):
        return "holds a control character"
    if not is_well_formed(value):
        return _SURROGATE
    return None


def url_problem(url: str) -> str | None:
    """Why `url` cannot be a push target, or `None` (the allowlist is the caller's check)."""
    if len(url) > MAX_URL_CHARS:
        return f"longer than {MAX_URL_CHARS} characters"
    if not _URL_CHARS.fullmatch(url):
        return "must be printable ASCII without spaces (percent-encode anything else)"
    if origin_of(url) is None:
        return "must be an absolute http(s) URL with a host, without userinfo or fragment"
    return None


def header_value_problem(value: str) -> str | None:
    """Why `value` cannot be sent as an HTTP header value, or `None`."""
    if len(value) > MAX_HEADER_CHARS:
        return f"longer than {MAX_HEADER_CHARS} characters"
    if not _HEADER_CHARS.fullmatch(value):
        return "must be printable ASCII and spaces (it is sent as an HTTP header)"
    return None


def auth_scheme_problem(value: str) -> str | None:
    """Why `value` cannot be an HTTP authentication scheme (RFC 9110 token), or `None`."""
    if not value:
        return "must not be empty"
    if len(value) > 64 or not _TOKEN.fullmatch(value):
        return "must be an HTTP authentication scheme such as Bearer"
    return None


def push_target_problems(
    url: str, token: str, scheme: str | None, credentials: str
) -> list[tuple[str, str]]:
    """Every reason a push config cannot be delivered, as (field, problem) pairs with field
    names relative to the config (`url`, `token`, `authentication.scheme`, ...)."""
    checks = [
        ("url", url_problem(url)),
        ("token", header_value_problem(token)),
        ("authentication.credentials", header_value_problem(credentials)),
    ]
    if scheme is not None:
        checks.append(("authentication.scheme", auth_scheme_problem(scheme)))
    return [(field, problem) for field, problem in checks if problem is not None]


def undeliverable_reason(url: str, token: str, scheme: str | None, credentials: str) -> str:
    """`push_target_problems` as one line for a log or an attempt record ("" if deliverable)."""
    problems = push_target_problems(url, token, scheme, credentials)
    return "; ".join(f"{field} {problem}" for field, problem in problems)
