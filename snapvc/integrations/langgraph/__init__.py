"""LangGraph's checkpointer on a snapvc repository: ``SnapvcSaver``.

    from snapvc.integrations.langgraph import SnapvcSaver
    graph = builder.compile(checkpointer=SnapvcSaver.from_conn_string("agent.snapvc"))

Needs the ``langgraph`` extra (``pip install '.[langgraph]'`` in a clone). ``saver.py`` maps threads, checkpoints and
pending writes onto branches and commits; ``values.py`` stores channel values as snapvc
values and reads many checkpoints at once. See ``docs/langgraph.md``.
"""

from __future__ import annotations

from snapvc.integrations.langgraph.saver import SnapvcSaver

__all__ = ["SnapvcSaver"]
