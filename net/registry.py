"""Handler registry: one module per API under net/apis/, each registering the
versions it serves. ApiVersions and COMPATIBILITY.md are built from this
table, so what is advertised cannot drift from what is implemented.
"""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from typing import Awaitable, Callable

from kio.schema.index import api_key_map


@dataclasses.dataclass(frozen=True)
class ApiHandler:
    api_key: int
    name: str
    min_version: int
    max_version: int
    handler: Callable[..., Awaitable]
    # Versions advertised but rejected (KAFKA-18659: librdkafka needs Produce
    # advertised from v0 although v0-2 requests are refused).
    advertised_min_version: int
    proving_tests: tuple[str, ...]

    def serves(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


_HANDLERS: dict[int, ApiHandler] = {}


def api(api_key: int, min_version: int, max_version: int, *, advertised_min_version: int | None = None,
        tests: tuple[str, ...] = ()):
    """Register `async def handle(ctx, request)` for an API key and version range."""

    def register(func):
        if api_key in _HANDLERS:
            raise RuntimeError(f"api key {api_key} registered twice")
        _HANDLERS[api_key] = ApiHandler(
            api_key=api_key,
            name=api_key_map[api_key],
            min_version=min_version,
            max_version=max_version,
            handler=func,
            advertised_min_version=min_version if advertised_min_version is None else advertised_min_version,
            proving_tests=tests,
        )
        return func

    return register


def handlers() -> dict[int, ApiHandler]:
    load_all()
    return _HANDLERS


_loaded = False


def load_all() -> None:
    """Import every net/apis/<nn>_<name>.py module (they register themselves)."""
    global _loaded
    if _loaded:
        return
    from net import apis

    for module in sorted(pkgutil.iter_modules(apis.__path__), key=lambda m: m.name):
        importlib.import_module(f"{apis.__name__}.{module.name}")
    _loaded = True
