"""The failure of one consumer-group request, raised where the check is made
and turned into the reply's error code and message by the coordinator.

Its own module: the coordinator (coordinator.py), the classic members' path
(classic_members.py) and protocol migration (migration.py) all raise it, and
the coordinator composes the other two.
"""
from __future__ import annotations

from typing import Optional

from core.error_codes import ErrorCode


class RequestFailure(Exception):
    def __init__(self, error: ErrorCode, message: Optional[str] = None):
        super().__init__(message or error.name)
        self.error = error
        self.message = message
