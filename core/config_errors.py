"""The error a configuration key's parser or a cross-key check raises.

Its own module so that every module that checks configuration can raise it
without importing the broker's config table (core/config.py imports
core/security_config.py for its listener keys; that module raises this).
"""
from __future__ import annotations


class ConfigError(ValueError):
    """A configuration key is unknown or its value is invalid."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key
