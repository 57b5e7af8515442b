"""``snapvc mcp``: a repository served to agents and assistants over the Model Context Protocol.

Built on the official ``mcp`` SDK (the ``mcp`` extra). ``snapvc.mcp.server`` registers
the tools on the SDK's server and serves them over stdio (or Streamable HTTP on
127.0.0.1); ``snapvc.mcp.tools`` is what each tool does, on the public ``Repository``.

Read tools: ``refs``, ``log`` (metadata, path and time filters, paged), ``show``,
``diff``, ``checkout`` (a path at a rev; large values paged), ``history``, ``reflog``.
Write tools, only when started with ``--write`` (else neither listed nor callable):
``commit``, ``branch``, ``reset``; each moves a ref through the repository, so each
lands in the reflog. See docs/mcp.md.
"""

from __future__ import annotations

__all__: list[str] = []
