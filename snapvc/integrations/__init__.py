"""Adapters that let agent frameworks keep their checkpoints in a snapvc repository.

Each lives in a module of its own and imports its framework only when imported itself:
``snapvc.integrations.langgraph`` (the ``langgraph`` extra: ``pip install '.[langgraph]'`` in a clone) is LangGraph's
checkpointer, ``SnapvcSaver``.
"""
