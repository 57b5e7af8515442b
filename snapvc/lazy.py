"""Names a package exports whose module loads when one is first read (PEP 562), so that
importing the package does not load every layer below it: ``import snapvc`` loads what
opening, committing and checking out need, and diffs, merges, maintenance, the runner
and asyncio load when first used. ``package.Name`` and ``from package import Name`` work
as for a name imported eagerly; the value is kept in the package once read.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, names: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` for ``names``: exported name ->
    the module that defines it (a name that is the module's own last part is the module)."""
    namespace = vars(sys.modules[package])

    def __getattr__(name: str) -> Any:
        where = names.get(name)
        if where is None:  # the attribute protocol: hasattr and getattr with a default catch it
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = import_module(where)
        value = module if where == f"{package}.{name}" else getattr(module, name)
        namespace[name] = value  # read once: a plain attribute from then on
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *names})

    return __getattr__, __dir__
