"""Trace links: a commit made inside an OpenTelemetry span, and the span, name each other.

Agents are traced with OpenTelemetry; their checkpoints are commits. When a commit is made
while a span is active (in the thread or task that commits), both sides get a link:

- **on the span**, the attribute ``gen_ai.agent.checkpoint.id`` holds the commit's id (64
  hex digits). It is the name the GenAI semantic conventions' proposal for agent lifecycle
  events gives a checkpoint's id (in development, as every ``gen_ai.*`` name is: it may
  still be renamed). One span may hold several commits, and an attribute keeps one value,
  so each commit also adds an event ``snapvc.commit`` to the span, with the same attribute
  and ``snapvc.ref``, the branch it moved (absent for a commit on no branch);
- **in the commit's metadata**, ``trace_id`` (32 hex digits) and ``span_id`` (16), in the
  W3C trace-context form that tracing tools show and search by, unless the metadata names
  them already: a caller's own ``trace_id`` (a run traced elsewhere) is kept as given.
  ``snapvc log --where trace_id=…`` lists a trace's checkpoints.

opentelemetry is never imported here. A span can be active only in a process that has
imported ``opentelemetry.trace`` already, so ``sys.modules`` says whether to look: a
process that does not trace pays one dictionary lookup a commit, and snapvc needs no
tracing package installed. The metadata link changes what a commit stores (and so its
id); ``set_trace_links(False)`` turns both links off for the process.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["CHECKPOINT_ID_ATTRIBUTE", "COMMIT_EVENT", "REF_ATTRIBUTE", "SpanLink", "active_span", "link_metadata",
           "record_commit", "set_trace_links"]

CHECKPOINT_ID_ATTRIBUTE: Final = "gen_ai.agent.checkpoint.id"
REF_ATTRIBUTE: Final = "snapvc.ref"
COMMIT_EVENT: Final = "snapvc.commit"
_TRACE_KEY: Final = "trace_id"
_SPAN_KEY: Final = "span_id"

_enabled = True


def set_trace_links(enabled: bool) -> None:
    """Link commits and active spans (the default), or not, in this whole process."""
    global _enabled
    _enabled = bool(enabled)


@dataclass(frozen=True, slots=True)
class SpanLink:
    """The active span a commit is made in, and its ids as hex text."""

    span: Any  # an opentelemetry.trace.Span
    trace_id: str
    span_id: str


def active_span() -> SpanLink | None:
    """The span active in this context, if it is a real one (a valid span context: not
    the API's no-op span, which every untraced context has) and links are on."""
    if not _enabled:
        return None
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    span = trace.get_current_span()
    context = span.get_span_context()
    if not context.is_valid:
        return None
    return SpanLink(span, format(context.trace_id, "032x"), format(context.span_id, "016x"))


def link_metadata(metadata: dict[str, Any] | None, link: SpanLink | None) -> dict[str, Any] | None:
    """``metadata`` with the span's ``trace_id`` and ``span_id`` added where it names none.
    Anything that is not a dict is returned as it is, for the commit to refuse."""
    if link is None:
        return metadata
    if metadata is None:
        return {_TRACE_KEY: link.trace_id, _SPAN_KEY: link.span_id}
    if not isinstance(metadata, dict) or _TRACE_KEY in metadata:
        return metadata  # the caller's link, or nothing to add to
    return {**metadata, _TRACE_KEY: link.trace_id, _SPAN_KEY: link.span_id}


def record_commit(link: SpanLink | None, commit_id: str, ref: str | None) -> None:
    """Name the commit just made on the span it was made in."""
    if link is None:
        return
    span = link.span
    if not span.is_recording():  # sampled out: the span keeps nothing
        return
    span.set_attribute(CHECKPOINT_ID_ATTRIBUTE, commit_id)
    attributes = {CHECKPOINT_ID_ATTRIBUTE: commit_id}
    if ref is not None:
        attributes[REF_ATTRIBUTE] = ref
    span.add_event(COMMIT_EVENT, attributes)
