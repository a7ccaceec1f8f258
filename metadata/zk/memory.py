"""An in-memory ZooKeeper, so that unit tests of code that keeps its state in
ZooKeeper (the controller, the balancer) need no JVM.

The seam: ZkSession builds its kazoo client with a factory (KazooClient by
default), and `MemoryZooKeeper.client` is a drop-in factory. ZkSession, the
znode families and kazoo's own DataWatch/ChildrenWatch recipes run unchanged
on top of it, so a test still exercises our code down to kazoo's public API.
tests/unit/test_zk_contract.py runs the same assertions against this server
and the real one, so the two cannot drift apart unnoticed.

What it models, as ZooKeeper 3.8 does:
- znodes with data and the stat: czxid/mzxid/pzxid from one zxid per write
  transaction (a multi is one), version, cversion, aversion, ephemeralOwner,
  dataLength, numChildren; ACLs are kept and answered, not enforced;
- sequential znodes: a 10-digit suffix counting the children ever created
  under that parent, deleted ones included (a real 3.8 server's suffix; its
  cversion, by contrast, counts the deletes too);
- multi-op transactions, all or nothing; a failed one answers, as kazoo reads
  ZooKeeper's reply, RolledBackError for the ops before the failing one, its
  error, and RuntimeInconsistency for the ops after it;
- one-shot data/exists and child watches with ZooKeeper's triggers, queued on
  the client's kazoo handler in commit order (so callbacks run on the handler's
  thread, never under the caller's lock);
- sessions, several per server: a session's ephemerals go when it closes or
  expires. `expire_session` is what a long partition does: the client sees
  LOST, its watches a NONE event, and then (kazoo reconnects by itself) a new
  session and CONNECTED.

Children are listed sorted (ZooKeeper promises no order, so no caller may
rely on one). Not modelled: the network (no SUSPENDED state, no request timeouts), ACL
checks, credentials and TLS (accepted and ignored; test_zk_security.py covers
them on the real server), quotas, container and TTL znodes, jute.maxbuffer.
"""
from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, NamedTuple

from kazoo import exceptions as kazoo_errors
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import AsyncResult
from kazoo.protocol.paths import join, normpath
from kazoo.protocol.states import Callback, EventType, KazooState, KeeperState, WatchedEvent, ZnodeStat
from kazoo.retry import KazooRetry
from kazoo.security import OPEN_ACL_UNSAFE

from metadata.zk_paths import split_chroot

log = logging.getLogger(__name__)

# KazooClient options a test's client may be given (ZkSession passes the
# process's security settings) that mean nothing without a network or ACL checks.
IGNORED_KAZOO_OPTIONS = frozenset({"auth_data", "use_ssl", "verify_certs", "check_hostname", "ca", "certfile",
                                   "keyfile", "keyfile_password", "connection_retry", "logger", "randomize_hosts"})
# The znodes a fresh ZooKeeper 3.8 server holds, so that listing "/" answers the same.
SERVER_ZNODES = ("/zookeeper", "/zookeeper/config", "/zookeeper/quota")


class CreateOp(NamedTuple):
    path: str
    data: bytes | None
    acl: list
    ephemeral: bool
    sequence: bool


class DeleteOp(NamedTuple):
    path: str
    version: int


class SetDataOp(NamedTuple):
    path: str
    data: bytes
    version: int


class CheckOp(NamedTuple):
    path: str
    version: int


WriteOp = CreateOp | DeleteOp | SetDataOp | CheckOp


class ZnodeEvent(NamedTuple):
    """What a committed write tells the watchers of `path` (a server path, chroot included)."""
    type: str  # kazoo's EventType
    path: str


@dataclass
class Znode:
    data: bytes | None
    acl: list
    ephemeral_owner: int
    czxid: int
    ctime: int
    mzxid: int
    mtime: int
    pzxid: int
    version: int = 0
    cversion: int = 0
    aversion: int = 0
    children: set[str] = field(default_factory=set)
    # The next sequential child's number: creates only, where cversion also counts deletes.
    child_creates: int = 0

    def copy(self) -> "Znode":
        return replace(self, acl=list(self.acl), children=set(self.children))

    def stat(self) -> ZnodeStat:
        return ZnodeStat(czxid=self.czxid, mzxid=self.mzxid, ctime=self.ctime, mtime=self.mtime,
                         version=self.version, cversion=self.cversion, aversion=self.aversion,
                         ephemeralOwner=self.ephemeral_owner, dataLength=len(self.data or b""),
                         numChildren=len(self.children), pzxid=self.pzxid)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _parent_and_name(path: str) -> tuple[str, str]:
    parent, _, name = path.rpartition("/")
    return (parent or "/"), name


def _check_version(expected: int, actual: int) -> None:
    # -1 is ZooKeeper's "any version".
    if expected != -1 and expected != actual:
        raise kazoo_errors.BadVersionError()


class WriteTransaction:
    """One write transaction on the tree: each op sees the ones before it, and
    rollback() puts back every znode it touched (a failed multi leaves nothing)."""

    def __init__(self, nodes: dict[str, Znode], zxid: int, session_id: int):
        self.nodes = nodes
        self.zxid = zxid
        self.session_id = session_id
        self.now_ms = _now_ms()
        self.events: list[ZnodeEvent] = []
        self._saved: dict[str, Znode | None] = {}

    def apply(self, op: WriteOp) -> Any:
        """Check then apply one op (nothing changes if it raises); returns what kazoo answers for it."""
        if isinstance(op, CreateOp):
            return self._create(op)
        if isinstance(op, DeleteOp):
            return self._delete(op)
        if isinstance(op, SetDataOp):
            return self._set_data(op)
        return self._check(op)

    def rollback(self) -> None:
        for path, before in self._saved.items():
            if before is None:
                self.nodes.pop(path, None)
            else:
                self.nodes[path] = before
        self.events.clear()

    def _save(self, path: str) -> None:
        if path not in self._saved:
            node = self.nodes.get(path)
            self._saved[path] = None if node is None else node.copy()

    def _existing(self, path: str) -> Znode:
        node = self.nodes.get(path)
        if node is None:
            raise kazoo_errors.NoNodeError()
        return node

    def _create(self, op: CreateOp) -> str:
        # ZooKeeper's order of checks (PrepRequestProcessor): the parent, the name, then an ephemeral parent.
        if op.path == "/":
            raise kazoo_errors.NodeExistsError()
        # "/q/" with sequence=True names the child by its number alone ("/q/0000000003").
        parent_path = (op.path.rstrip("/") or "/") if op.path.endswith("/") else _parent_and_name(op.path)[0]
        parent = self._existing(parent_path)
        path = f"{op.path}{parent.child_creates:010d}" if op.sequence else op.path
        if path in self.nodes:
            raise kazoo_errors.NodeExistsError()
        if parent.ephemeral_owner:
            raise kazoo_errors.NoChildrenForEphemeralsError()
        self._save(parent_path)
        self._save(path)
        parent.children.add(_parent_and_name(path)[1])
        parent.child_creates += 1
        parent.cversion += 1
        parent.pzxid = self.zxid
        self.nodes[path] = Znode(data=op.data, acl=list(op.acl), ephemeral_owner=self.session_id if op.ephemeral else 0,
                                 czxid=self.zxid, ctime=self.now_ms, mzxid=self.zxid, mtime=self.now_ms,
                                 pzxid=self.zxid)
        self.events += [ZnodeEvent(EventType.CREATED, path), ZnodeEvent(EventType.CHILD, parent_path)]
        return path

    def _delete(self, op: DeleteOp) -> bool:
        if op.path == "/":
            raise kazoo_errors.BadArgumentsError()
        node = self._existing(op.path)
        _check_version(op.version, node.version)
        if node.children:
            raise kazoo_errors.NotEmptyError()
        parent_path, name = _parent_and_name(op.path)
        self._save(parent_path)
        self._save(op.path)
        parent = self.nodes[parent_path]
        parent.children.discard(name)
        parent.cversion += 1
        parent.pzxid = self.zxid
        del self.nodes[op.path]
        self.events += [ZnodeEvent(EventType.DELETED, op.path), ZnodeEvent(EventType.CHILD, parent_path)]
        return True

    def _set_data(self, op: SetDataOp) -> ZnodeStat:
        node = self._existing(op.path)
        _check_version(op.version, node.version)
        self._save(op.path)
        node.data = op.data
        node.version += 1
        node.mzxid = self.zxid
        node.mtime = self.now_ms
        self.events.append(ZnodeEvent(EventType.CHANGED, op.path))
        return node.stat()

    def _check(self, op: CheckOp) -> bool:
        node = self._existing(op.path)
        _check_version(op.version, node.version)
        return True


class MemoryZooKeeper:
    """One ZooKeeper server in memory: the znode tree, its sessions and their
    watches. Thread-safe: every request runs under one lock, as ZooKeeper
    applies transactions one at a time."""

    _servers = itertools.count(1)

    def __init__(self) -> None:
        # A host part that names this server, so a client wired to another server fails loudly.
        self.connect_string = f"in-memory-zookeeper-{next(self._servers)}:2181"
        self._lock = threading.RLock()
        self._zxid = 0
        now = _now_ms()
        self._nodes: dict[str, Znode] = {"/": Znode(b"", list(OPEN_ACL_UNSAFE), 0, 0, now, 0, now, 0)}
        for path in SERVER_ZNODES:
            parent, name = _parent_and_name(path)
            self._nodes[parent].children.add(name)
            self._nodes[path] = Znode(b"", list(OPEN_ACL_UNSAFE), 0, 0, now, 0, now, 0)
        self._sessions: dict[int, MemoryKazooClient] = {}
        # Session ids as a standalone server makes them: the start time in the high bits, then a counter.
        self._session_ids = itertools.count(((int(time.monotonic() * 1000) << 24) & (2**63 - 1)) >> 8)

    def client(self, hosts: str | None = None, timeout: float = 10.0, **kazoo_options: Any) -> "MemoryKazooClient":
        """A kazoo-compatible client of this server, taking KazooClient's keyword
        arguments: what ZkSession's client_factory is given."""
        return MemoryKazooClient(self, hosts or self.connect_string, timeout, **kazoo_options)

    def expire_session(self, session_id: int) -> None:
        """End a session as ZooKeeper does when its timeout passes without a word
        from the client (a long partition, a stalled process): its ephemerals go
        and the other sessions' watches fire; its client then, as kazoo does,
        reports LOST, fires its watches with a NONE event and opens a new session
        (on a thread of its own, as kazoo's connection thread would)."""
        with self._lock:
            client = self._sessions.get(session_id)
            if client is None:
                raise KeyError(f"no live session 0x{session_id:x}")
            watchers = self._end_session(client, KeeperState.EXPIRED_SESSION)
        threading.Thread(target=client._after_expiry, args=(watchers,), daemon=True,
                         name=f"in-memory zookeeper: session 0x{session_id:x} expired").start()

    @property
    def session_ids(self) -> list[int]:
        with self._lock:
            return sorted(self._sessions)

    # ---- what a client asks (paths here are server paths, the client's chroot included) ----------------------

    def _open_session(self, client: "MemoryKazooClient") -> None:
        with self._lock:
            session_id = next(self._session_ids)
            client._session_id, client._session_password = session_id, os.urandom(16)
            client._state = KeeperState.CONNECTED
            self._sessions[session_id] = client

    def _close_session(self, client: "MemoryKazooClient") -> list[Callable]:
        """The client ends its session (kazoo's stop()); returns its watchers, now dropped."""
        with self._lock:
            if self._sessions.get(client._session_id) is not client:
                client._state = KeeperState.CLOSED
                return client._take_watchers()
            return self._end_session(client, KeeperState.CLOSED)

    def _end_session(self, client: "MemoryKazooClient", state: str) -> list[Callable]:
        # Out of the session table first: a gone session's connection hears nothing more.
        session_id = client._session_id
        del self._sessions[session_id]
        client._state = state
        client._session_id = None
        ephemerals = sorted(path for path, node in self._nodes.items() if node.ephemeral_owner == session_id)
        # ZooKeeper's closeSession is one transaction deleting them all.
        self._commit([DeleteOp(path, -1) for path in ephemerals], session_id, multi=True)
        return client._take_watchers()

    def _live(self, client: "MemoryKazooClient") -> None:
        # As kazoo answers a request made in each state (KazooClient._call).
        if client._session_id is not None and self._sessions.get(client._session_id) is client:
            return
        if client._state == KeeperState.EXPIRED_SESSION:
            raise kazoo_errors.SessionExpiredError()
        raise kazoo_errors.ConnectionClosedError("Connection has been closed")

    def _get(self, client: "MemoryKazooClient", path: str, watch: Callable | None) -> tuple[bytes | None, ZnodeStat]:
        with self._lock:
            self._live(client)
            node = self._nodes.get(path)
            if node is None:
                raise kazoo_errors.NoNodeError()  # and no watch is left, as ZooKeeper leaves none
            if watch is not None:
                client._data_watchers[path].add(watch)
            return node.data, node.stat()

    def _exists(self, client: "MemoryKazooClient", path: str, watch: Callable | None) -> ZnodeStat | None:
        with self._lock:
            self._live(client)
            node = self._nodes.get(path)
            if watch is not None:
                # An exists watch on an absent znode waits for its creation.
                client._data_watchers[path].add(watch)
            return None if node is None else node.stat()

    def _get_children(self, client: "MemoryKazooClient", path: str, watch: Callable | None) -> list[str]:
        with self._lock:
            self._live(client)
            node = self._nodes.get(path)
            if node is None:
                raise kazoo_errors.NoNodeError()
            if watch is not None:
                client._child_watchers[path].add(watch)
            return sorted(node.children)

    def _get_acls(self, client: "MemoryKazooClient", path: str) -> tuple[list, ZnodeStat]:
        with self._lock:
            self._live(client)
            node = self._nodes.get(path)
            if node is None:
                raise kazoo_errors.NoNodeError()
            return list(node.acl), node.stat()

    def _set_acls(self, client: "MemoryKazooClient", path: str, acls: list, version: int) -> ZnodeStat:
        with self._lock:
            self._live(client)
            self._zxid += 1
            node = self._nodes.get(path)
            if node is None:
                raise kazoo_errors.NoNodeError()
            _check_version(version, node.aversion)
            node.acl = list(acls)
            node.aversion += 1
            return node.stat()

    def _write(self, client: "MemoryKazooClient", ops: list[WriteOp], multi: bool) -> Any:
        """One write transaction for `client`'s session: a single op answers its
        result or raises; a multi answers one result per op."""
        with self._lock:
            self._live(client)
            return self._commit(ops, client._session_id, multi)

    def _create_with_parents(self, client: "MemoryKazooClient", op: CreateOp) -> str:
        """kazoo's makepath: on NoNode, create the missing parents (persistent, with
        the same ACL, each its own transaction), then the znode."""
        with self._lock:
            try:
                return self._write(client, [op], multi=False)
            except kazoo_errors.NoNodeError:
                parent = op.path.rstrip("/") if op.sequence and op.path.endswith("/") else _parent_and_name(op.path)[0]
                self._ensure_path(client, parent, op.acl)
                return self._write(client, [op], multi=False)

    def _ensure_path(self, client: "MemoryKazooClient", path: str, acl: list) -> bool:
        with self._lock:
            self._live(client)
            partial = ""
            for name in path.strip("/").split("/") if path != "/" else ():
                partial += "/" + name
                if partial not in self._nodes:
                    self._commit([CreateOp(partial, b"", acl, False, False)], client._session_id, multi=False)
            return True

    def _commit(self, ops: list[WriteOp], session_id: int, multi: bool) -> Any:
        # Caller holds the lock. Like ZooKeeper, a failed request uses up a zxid too.
        self._zxid += 1
        transaction = WriteTransaction(self._nodes, self._zxid, session_id)
        results: list[Any] = []
        for index, op in enumerate(ops):
            try:
                results.append(transaction.apply(op))
            except kazoo_errors.ZookeeperError as error:
                transaction.rollback()
                if not multi:
                    raise
                return ([kazoo_errors.RolledBackError() for _ in range(index)] + [error]
                        + [kazoo_errors.RuntimeInconsistency() for _ in range(len(ops) - index - 1)])
        self._notify(transaction.events)
        return results if multi else results[0]

    def _notify(self, events: Iterable[ZnodeEvent]) -> None:
        # Under the lock, so each client's handler queue gets events in commit order;
        # the callbacks themselves run later, on the handler's thread.
        for event in events:
            for client in self._sessions.values():
                client._trigger(event)


class MemoryKazooClient:
    """The part of KazooClient that ZkSession and kazoo's DataWatch/ChildrenWatch
    recipes use, served by a MemoryZooKeeper: same arguments, results, exceptions,
    states, listeners and watch events. Requests complete at once; their results
    are kazoo AsyncResults, watch callbacks run on kazoo's own handler thread."""

    def __init__(self, server: MemoryZooKeeper, hosts: str, timeout: float = 10.0, *,
                 default_acl: list | None = None, command_retry: dict | KazooRetry | None = None,
                 **kazoo_options: Any):
        unknown = set(kazoo_options) - IGNORED_KAZOO_OPTIONS
        if unknown:
            # e.g. client_id (taking over another session): not modelled, so refused rather than ignored.
            raise TypeError(f"MemoryKazooClient does not model the KazooClient options {sorted(unknown)}")
        host_part, chroot = split_chroot(hosts)
        if host_part != server.connect_string:
            raise ValueError(f"{hosts!r} does not name the in-memory server {server.connect_string!r}")
        self.server = server
        self.hosts = hosts
        self.chroot = chroot or ""
        self.timeout = timeout
        self.default_acl = default_acl
        self.handler = SequentialThreadingHandler()
        if isinstance(command_retry, KazooRetry):
            command_retry_template = command_retry
        else:
            command_retry_template = KazooRetry(sleep_func=self.handler.sleep_func, **(command_retry or {}))
        # Like kazoo: every retried call gets its own copy, so callers share no attempt counts.
        self.retry = lambda *args, **kwargs: command_retry_template.copy()(*args, **kwargs)
        self.state = KazooState.LOST
        self._state = KeeperState.CLOSED
        self._session_id: int | None = None
        self._session_password = b"\x00" * 16
        self._listeners: list[Callable[[str], Any]] = []
        # Like KazooClient's: server path -> watch functions; changed only under the server's lock.
        self._data_watchers: dict[str, set[Callable]] = defaultdict(set)
        self._child_watchers: dict[str, set[Callable]] = defaultdict(set)
        # start/stop/expiry one at a time (always taken before the server's lock).
        self._lifecycle = threading.Lock()

    # ---- session ----------------------------------------------------------------------------------------------

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        return (self._session_id, self._session_password) if self._session_id is not None else None

    @property
    def client_state(self) -> str:
        return self._state

    @property
    def connected(self) -> bool:
        return self._state == KeeperState.CONNECTED

    def add_listener(self, listener: Callable[[str], Any]) -> None:
        if listener not in self._listeners:
            self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[str], Any]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def start(self, timeout: float = 15) -> None:
        with self._lifecycle:
            if self._state == KeeperState.CONNECTED:
                return
            self.handler.start()
            self.server._open_session(self)
        self._state_change(KazooState.CONNECTED)

    def stop(self) -> None:
        """End the session (its ephemerals go) and stop the handler, as KazooClient.stop()."""
        with self._lifecycle:
            if self._state == KeeperState.CLOSED:
                return
            watchers = self.server._close_session(self)
        self._state_change(KazooState.LOST)
        self._dispatch_none_event(watchers)
        self.handler.stop()

    def close(self) -> None:
        self.handler.stop()

    def _after_expiry(self, watchers: list[Callable]) -> None:
        # kazoo's order on an expired session: LOST, the watches' NONE event, then a new session.
        self._state_change(KazooState.LOST)
        self._dispatch_none_event(watchers)
        with self._lifecycle:
            if self._state != KeeperState.EXPIRED_SESSION:
                return  # stopped meanwhile
            self.server._open_session(self)
        self._state_change(KazooState.CONNECTED)

    def _state_change(self, state: str) -> None:
        # kazoo calls listeners on its connection thread; a listener returning True is removed.
        if self.state == state:
            return
        self.state = state
        for listener in list(self._listeners):
            try:
                if listener(state) is True:
                    self.remove_listener(listener)
            except Exception:
                log.exception("Error in connection state listener")

    # ---- watches ----------------------------------------------------------------------------------------------

    def _trigger(self, event: ZnodeEvent) -> None:
        # Server lock held. kazoo's rules for which watchers an event wakes (ConnectionHandler._read_watch_event).
        # A list, not a set: a function that is both a data and a child watcher is called twice, as by kazoo.
        watchers: list[Callable] = []
        if event.type in (EventType.CREATED, EventType.CHANGED, EventType.DELETED):
            watchers += self._data_watchers.pop(event.path, ())
        if event.type in (EventType.DELETED, EventType.CHILD):
            watchers += self._child_watchers.pop(event.path, ())
        if watchers:
            watched = WatchedEvent(event.type, self._state, self._unchroot(event.path))
            for watch in watchers:
                self.handler.dispatch_callback(Callback("watch", watch, (watched,)))

    def _take_watchers(self) -> list[Callable]:
        watchers = [w for ws in self._data_watchers.values() for w in ws]
        watchers += [w for ws in self._child_watchers.values() for w in ws]
        self._data_watchers = defaultdict(set)
        self._child_watchers = defaultdict(set)
        return watchers

    def _dispatch_none_event(self, watchers: list[Callable]) -> None:
        event = WatchedEvent(EventType.NONE, self._state, None)
        for watch in watchers:
            self.handler.dispatch_callback(Callback("watch", watch, (event,)))

    # ---- paths ------------------------------------------------------------------------------------------------

    def _server_path(self, path: Any, trailing: bool = False) -> str:
        if not isinstance(path, str):
            raise TypeError("Invalid type for 'path' (string expected)")
        return normpath(join(self.chroot or "/", path.lstrip("/")), trailing=trailing)

    def _unchroot(self, path: str) -> str:
        if not self.chroot:
            return path
        if path == self.chroot:
            return "/"
        return path[len(self.chroot):] if path.startswith(self.chroot) else path

    def _answer(self, request: Callable[[], Any]) -> AsyncResult:
        result = self.handler.async_result()
        try:
            result.set(request())
        except Exception as error:  # kazoo hands every request's error back through its AsyncResult
            result.set_exception(error)
        return result

    def _create_op(self, path: str, value: bytes | None, acl: list | None, ephemeral: bool, sequence: bool,
                   trailing: bool) -> CreateOp:
        if value is not None and not isinstance(value, bytes):
            raise TypeError("Invalid type for 'value' (must be a byte string)")
        if not isinstance(ephemeral, bool) or not isinstance(sequence, bool):
            raise TypeError("Invalid type for 'ephemeral'/'sequence' (bool expected)")
        acl = acl or self.default_acl or OPEN_ACL_UNSAFE
        return CreateOp(self._server_path(path, trailing=trailing), value, list(acl), ephemeral, sequence)

    # ---- requests (the *_async ones answer an AsyncResult, the others the result or raise) -------------------

    def get_async(self, path: str, watch: Callable | None = None) -> AsyncResult:
        server_path = self._server_path(path)
        return self._answer(lambda: self.server._get(self, server_path, watch))

    def exists_async(self, path: str, watch: Callable | None = None) -> AsyncResult:
        server_path = self._server_path(path)
        return self._answer(lambda: self.server._exists(self, server_path, watch))

    def get_children_async(self, path: str, watch: Callable | None = None, include_data: bool = False) -> AsyncResult:
        if include_data:
            raise NotImplementedError("get_children(include_data=True) is not modelled")
        server_path = self._server_path(path)
        return self._answer(lambda: self.server._get_children(self, server_path, watch))

    def create_async(self, path: str, value: bytes = b"", acl: list | None = None, ephemeral: bool = False,
                     sequence: bool = False, makepath: bool = False) -> AsyncResult:
        op = self._create_op(path, value, acl, ephemeral, sequence, trailing=sequence)
        if makepath:
            return self._answer(lambda: self._unchroot(self.server._create_with_parents(self, op)))
        return self._answer(lambda: self._unchroot(self.server._write(self, [op], multi=False)))

    def ensure_path_async(self, path: str, acl: list | None = None) -> AsyncResult:
        server_path = self._server_path(path)
        acl = list(acl or self.default_acl or OPEN_ACL_UNSAFE)
        return self._answer(lambda: self.server._ensure_path(self, server_path, acl))

    def set_async(self, path: str, value: bytes, version: int = -1) -> AsyncResult:
        if not isinstance(value, bytes):
            raise TypeError("Invalid type for 'value' (must be a byte string)")
        op = SetDataOp(self._server_path(path), value, version)
        return self._answer(lambda: self.server._write(self, [op], multi=False))

    def delete_async(self, path: str, version: int = -1) -> AsyncResult:
        op = DeleteOp(self._server_path(path), version)
        return self._answer(lambda: self.server._write(self, [op], multi=False))

    def get_acls_async(self, path: str) -> AsyncResult:
        server_path = self._server_path(path)
        return self._answer(lambda: self.server._get_acls(self, server_path))

    def set_acls_async(self, path: str, acls: list, version: int = -1) -> AsyncResult:
        server_path = self._server_path(path)
        return self._answer(lambda: self.server._set_acls(self, server_path, acls, version))

    def transaction(self) -> "MemoryTransaction":
        return MemoryTransaction(self)

    def _commit(self, ops: list[WriteOp]) -> list[Any]:
        results = self.server._write(self, ops, multi=True)
        # kazoo strips the chroot from the paths a multi created (Transaction.unchroot).
        return [self._unchroot(r) if isinstance(r, str) else r for r in results]

    def get(self, path: str, watch: Callable | None = None) -> tuple[bytes | None, ZnodeStat]:
        return self.get_async(path, watch).get()

    def exists(self, path: str, watch: Callable | None = None) -> ZnodeStat | None:
        return self.exists_async(path, watch).get()

    def get_children(self, path: str, watch: Callable | None = None, include_data: bool = False) -> list[str]:
        return self.get_children_async(path, watch, include_data).get()

    def create(self, path: str, value: bytes = b"", acl: list | None = None, ephemeral: bool = False,
               sequence: bool = False, makepath: bool = False) -> str:
        return self.create_async(path, value, acl, ephemeral, sequence, makepath).get()

    def ensure_path(self, path: str, acl: list | None = None) -> bool:
        return self.ensure_path_async(path, acl).get()

    def set(self, path: str, value: bytes, version: int = -1) -> ZnodeStat:
        return self.set_async(path, value, version).get()

    def delete(self, path: str, version: int = -1) -> bool:
        return self.delete_async(path, version).get()

    def get_acls(self, path: str) -> tuple[list, ZnodeStat]:
        return self.get_acls_async(path).get()

    def set_acls(self, path: str, acls: list, version: int = -1) -> ZnodeStat:
        return self.set_acls_async(path, acls, version).get()


class MemoryTransaction:
    """kazoo's TransactionRequest over a MemoryKazooClient: ops collected, then
    committed as one all-or-nothing write."""

    def __init__(self, client: MemoryKazooClient):
        self.client = client
        self.operations: list[WriteOp] = []
        self.committed = False

    def create(self, path: str, value: bytes = b"", acl: list | None = None, ephemeral: bool = False,
               sequence: bool = False) -> None:
        # kazoo keeps no trailing "/" for a sequential create inside a transaction.
        self.operations.append(self.client._create_op(path, value, acl, ephemeral, sequence, trailing=False))

    def delete(self, path: str, version: int = -1) -> None:
        self.operations.append(DeleteOp(self.client._server_path(path), version))

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        if not isinstance(value, bytes):
            raise TypeError("Invalid type for 'value' (must be a byte string)")
        self.operations.append(SetDataOp(self.client._server_path(path), value, version))

    def check(self, path: str, version: int) -> None:
        self.operations.append(CheckOp(self.client._server_path(path), version))

    def commit_async(self) -> AsyncResult:
        if self.committed:
            raise ValueError("Transaction already committed")
        self.committed = True
        operations = list(self.operations)
        return self.client._answer(lambda: self.client._commit(operations))

    def commit(self) -> list[Any]:
        return self.commit_async().get()

    def __enter__(self) -> "MemoryTransaction":
        return self

    def __exit__(self, exc_type: Any, *_exc: Any) -> None:
        if exc_type is None:
            self.commit()
