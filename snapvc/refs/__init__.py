"""Refs: named, movable pointers to commits, their reflog, ref-name rules and rev syntax.

``RefStore`` (``base``) is the protocol (each backend in ``snapvc.backends`` has one);
``names`` holds git's ref-name rules; ``revs`` parses and resolves ``main~2^2``,
``main@{1}`` and id prefixes.
"""

from __future__ import annotations

from snapvc.refs.base import ReflogEntry, RefStore
from snapvc.refs.names import (
    branch_ref,
    check_full_ref_name,
    check_ref_name,
    short_name,
    tag_ref,
)
from snapvc.refs.revs import Rev, parse_rev, resolve_rev

__all__ = [
    "ReflogEntry",
    "RefStore",
    "check_ref_name",
    "check_full_ref_name",
    "branch_ref",
    "tag_ref",
    "short_name",
    "parse_rev",
    "resolve_rev",
    "Rev",
]
