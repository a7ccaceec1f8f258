"""Errors of starting and stopping a broker: StartupError stops a start with
a message for the operator (no traceback): inconsistent ids on disk, a Ray
node that cannot be used, an edge that got no metadata in time."""
from __future__ import annotations

import logging

log = logging.getLogger("raykafka")


class StartupError(Exception):
    pass


def quietly(action) -> None:
    """Run a step of a shutdown (or the clean-up of a failed start) that must
    not stop the steps after it: report its error and carry on."""
    try:
        action()
    except Exception as exc:
        log.warning("during shutdown: %r", exc)
