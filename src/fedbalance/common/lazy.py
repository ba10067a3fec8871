"""A subpackage's public API, imported on first use (PEP 562): ``import fedbalance.data`` stays cheap (no torch) and
``fedbalance.data.Source`` still names the class."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping
from typing import Any


def lazy_api(package: str, names: Mapping[str, str], *, fallback: str | None = None
             ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(``__getattr__``, ``__dir__``) for ``package``: each of ``names`` (public name -> its module, relative to the
    package) imported from its module when first read; any other name from ``fallback``'s module, the module the
    package was before it became one (``fedbalance.data`` was today's ``fedbalance.data.datasets``)."""

    def getattr_(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if importlib.util.find_spec(f"{package}.{name}") is not None:  # a submodule, not a name of the fallback's
            return importlib.import_module(f"{package}.{name}")
        module = names.get(name, fallback)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            return getattr(importlib.import_module(f"{package}.{module}"), name)
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None

    def dir_() -> list[str]:
        return sorted(names)

    return getattr_, dir_
