"""The error every admin command reports and exits on.

Its own module because both the admin client (cli/admin_client.py) and the
client security settings (cli/client_security.py, whose SecurityConfigError
is one) raise it, and the admin client builds on the security settings: with
the class in either of them the two would import each other.
"""
from __future__ import annotations


class AdminError(Exception):
    """The command cannot go on: no broker reachable, a bad answer, a refused API."""
