"""The ACL znodes of Kafka's AclAuthorizer (ZkData's AclZNode, ExtendedAclZNode
and their change stores): /kafka-acl/<Type>/<name> and
/kafka-acl-extended/prefixed/<Type>/<name> hold one resource pattern's ACLs,
/kafka-acl-changes and /kafka-acl-extended-changes announce each change.

What the JSON means (resource patterns, entries) is the authorizer's
(cluster/security/authorizer.py); this family reads and writes the znodes, with
versioned writes so that concurrent writers on other brokers never lose one
another's ACLs."""
from __future__ import annotations

from typing import Any, Callable

from metadata import zk_paths
from metadata.zk.errors import ZkNoNodeError
from metadata.zk.events import WatchHandle
from metadata.zk.session import ZkSession

_ACL_ROOTS = (zk_paths.KAFKA_ACL, zk_paths.KAFKA_ACL_EXTENDED)
_CHANGE_ROOTS = (zk_paths.KAFKA_ACL_CHANGES, zk_paths.KAFKA_ACL_EXTENDED_CHANGES)


def _under(path: str, roots: tuple[str, ...]) -> str:
    if not any(path.startswith(root + "/") for root in roots) or "/../" in path or path.endswith("/.."):
        raise ValueError(f"{path!r} is not under {roots}")
    return path


def _change_root(change_path: str) -> str:
    if change_path not in _CHANGE_ROOTS:
        raise ValueError(f"{change_path!r} is not an ACL change path {_CHANGE_ROOTS}")
    return change_path


class AclsZk:
    """ACL znodes, addressed by path under /kafka-acl or /kafka-acl-extended."""

    def __init__(self, session: ZkSession):
        self._session = session

    def ensure_roots(self) -> None:
        """Create the ACL roots and change paths (zk_paths.ACL_ROOT_PATHS)."""
        for path in zk_paths.ACL_ROOT_PATHS:
            if not self._session.exists(path):
                self._session.create_if_absent(path, makepath=True)

    # ---- one resource pattern's znode ---------------------------------------------------------------

    def read(self, path: str) -> tuple[bytes | None, int]:
        """(data, znode version) of an ACL znode; (None, -1) when absent."""
        found = self._session.get(_under(path, _ACL_ROOTS))
        if found is None:
            return None, -1
        return found[0], found[1].version

    def children(self, path: str) -> list[str] | None:
        """Names under an ACL root or resource type znode; None when absent."""
        if path not in _ACL_ROOTS:
            _under(path, _ACL_ROOTS)
        return self._session.children(path)

    def create(self, path: str, data: bytes) -> None:
        """Create the znode (and parents); ZkNodeExistsError when a concurrent writer was first."""
        self._session.create(_under(path, _ACL_ROOTS), data, makepath=True)

    def set(self, path: str, data: bytes, expected_version: int) -> None:
        """Replace the znode's data at ``expected_version``; BadVersionError when it moved on."""
        self._session.set(_under(path, _ACL_ROOTS), data, expected_version)

    def delete(self, path: str, expected_version: int) -> None:
        """Delete the znode at ``expected_version``; BadVersionError when it moved on,
        ZkNotEmptyError when it is also the parent of a nested name's znode."""
        if not self._session.delete(_under(path, _ACL_ROOTS), expected_version):
            raise ZkNoNodeError(f"delete {path}: znode does not exist")

    # ---- change notifications ------------------------------------------------------------------

    def add_change(self, change_path: str, prefix: str, data: bytes) -> str:
        """Persistent sequential <change_path>/<prefix><seq>; returns its name."""
        created = self._session.create(f"{_change_root(change_path)}/{prefix}", data, sequence=True, makepath=True)
        return created.rsplit("/", 1)[1]

    def change_names(self, change_path: str) -> list[str]:
        return list(self._session.children(_change_root(change_path)) or [])

    def change(self, change_path: str, name: str) -> tuple[bytes, int] | None:
        """(data, creation time in ms) of one notification; None when it is gone."""
        found = self._session.get(f"{_change_root(change_path)}/{zk_paths._checked_name('ACL change', name)}")
        return None if found is None else (found[0], found[1].ctime)

    def delete_change(self, change_path: str, name: str) -> bool:
        return self._session.delete(f"{_change_root(change_path)}/{zk_paths._checked_name('ACL change', name)}")

    def watch_changes(self, change_path: str, callback: Callable[[list[str]], Any]) -> WatchHandle:
        """callback(notification names) now and whenever they change, on the event thread."""
        return self._session.watch_children(_change_root(change_path), WatchHandle(f"acl changes {change_path}"),
                                            list, callback)
