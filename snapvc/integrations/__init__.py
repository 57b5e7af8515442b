"""Adapters that let agent frameworks keep their checkpoints in a snapvc repository.

Each lives in a module of its own and imports its framework only when imported itself
(install its extra in a clone: ``pip install '.[langgraph]'``):

- ``snapvc.integrations.langgraph`` (the ``langgraph`` extra): LangGraph's checkpointer,
  ``SnapvcSaver``.
- ``snapvc.integrations.openai_agents`` (the ``openai-agents`` extra): a ``Session`` of the
  OpenAI Agents SDK, ``SnapvcSession``.
- ``snapvc.integrations.adk`` (the ``adk`` extra): a ``SessionService`` of Google's Agent
  Development Kit, ``SnapvcSessionService``.
- ``snapvc.integrations.pydantic_ai`` (the ``pydantic-ai`` extra): a conversation store
  for Pydantic AI's message history, ``SnapvcConversations``.

In each, a thread, session or conversation is a branch and each save a commit, so
``snapvc log --graph``, ``diff``, ``history``, forks and ``snapvc ui`` work on their runs.
"""
