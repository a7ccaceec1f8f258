"""One ZooKeeper session, as every znode family of metadata/zk/ uses it.

`ZkSession` owns the kazoo client: connecting (creating the chroot), closing,
session-lost/new-session events, and the request primitives the families
build on (get, create, set, delete, multi-op transactions, writes fenced on
/controller_epoch, watches).

Rules every request keeps:
- It is bounded: kazoo requests are waited on with `request_timeout_ms`,
  connecting with `connection_timeout_ms`. A ZkTimeoutError on a write means its
  outcome is unknown (kazoo may still send it after a reconnect).
- kazoo's exceptions never escape; they become the ZkError family (errors.py).
- Reads and idempotent writes are retried across a dropped connection, within
  the same bound.
- Watch and session callbacks run on one thread of ours ("event thread"), one at
  a time and in order, never on kazoo's connection thread, so they may call back
  into the client.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Iterable, Sequence

from kazoo import exceptions as kazoo_errors
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from metadata import zk_paths, zk_security
from metadata.zk.events import EventThread, WatchHandle
from metadata.zk.errors import (BadVersionError, ControllerMovedError, ZkClientClosedError, ZkConnectionError,
                                ZkError, ZkNoNodeError, ZkNodeExistsError, ZkNotEmptyError, ZkTimeoutError,
                                translate)

log = logging.getLogger(__name__)

# Kafka's defaults: zookeeper.session.timeout.ms, and the connection timeout
# defaults to the session timeout.
DEFAULT_SESSION_TIMEOUT_MS = 18_000

# Builds a kazoo client from KazooClient's keyword arguments: KazooClient itself,
# or a stand-in with its interface (metadata/zk/memory.py, for unit tests).
KazooClientFactory = Callable[..., KazooClient]


class ZkSession:
    """One kazoo session: connect (and the chroot), close, session events, and
    bounded, translated requests. The znode families (metadata/zk/*.py) share it."""

    def __init__(
        self,
        connect_string: str,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        connection_timeout_ms: int | None = None,
        request_timeout_ms: int | None = None,
        security: "zk_security.ZkClientSecurity | None" = None,
        client_factory: KazooClientFactory = KazooClient,
    ):
        """
        connect_string: "host:port[,host:port...][/chroot]"; the chroot is created on start().
        security: credentials, TLS and znode ACLs (metadata/zk_security.py); default: this
            process's (zk_security.current()).
        connection_timeout_ms: how long start() waits for a session (default: the session timeout).
        request_timeout_ms: how long any single call waits (default: the session timeout,
            since a request cannot usefully outlive the session it was sent on).
        client_factory: what builds the kazoo clients (default KazooClient); the seam
            through which unit tests run on an in-memory ZooKeeper (metadata/zk/memory.py).
        """
        self.connect_string = connect_string
        self._hosts, self.chroot = zk_paths.split_chroot(connect_string)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms if connection_timeout_ms is not None else session_timeout_ms
        self.request_timeout_ms = request_timeout_ms if request_timeout_ms is not None else session_timeout_ms
        self._kazoo: KazooClient | None = None
        self._events: EventThread | None = None
        self._closing = False
        self._connected = threading.Event()
        self._state_lock = threading.Lock()
        self._last_session_id: int | None = None
        self._session_lost_callbacks: list[Callable[[], Any]] = []
        self._new_session_callbacks: list[Callable[[int], Any]] = []
        self._kazoo_watches: list[Any] = []  # keep recipe objects alive with the client
        self.security = security if security is not None else zk_security.current()
        self._client_factory = client_factory

    # ---- lifecycle -------------------------------------------------------------------------------------------

    def start(self, ensure_paths: bool = True) -> "ZkSession":
        """Connect (creating the chroot if any) and, by default, create Kafka's
        persistent top-level paths. Raises ZkTimeoutError if no session in time."""
        if self._kazoo is not None:
            return self
        self._closing = False
        if self.chroot:
            self._create_chroot()
        self._events = EventThread(name=f"kafka-zk-events[{self.connect_string}]")
        self._kazoo = self._client_factory(
            hosts=self.connect_string,
            timeout=self.session_timeout_ms / 1000.0,
            **self.security.kazoo_kwargs(),
            # kazoo's default backs off reconnects up to an hour; a broker must
            # keep trying every second or so to get its session back.
            connection_retry=dict(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
            command_retry=dict(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
        )
        self._kazoo.add_listener(self._on_kazoo_state)
        try:
            self._kazoo.start(timeout=self.connection_timeout_ms / 1000.0)
        except KazooTimeoutError:
            self._discard_after_failed_start()
            raise ZkTimeoutError(
                f"could not connect to ZooKeeper at {self.connect_string} "
                f"within {self.connection_timeout_ms} ms"
            ) from None
        except Exception as error:
            self._discard_after_failed_start()
            raise translate(error, f"connect to {self.connect_string}") from error
        client_id = self._kazoo.client_id
        self._last_session_id = client_id[0] if client_id else None
        if ensure_paths:
            try:
                self.ensure_persistent_paths()
            except BaseException:
                self.close()
                raise
        return self

    def close(self) -> None:
        """End the session (its ephemeral znodes go at once) and stop the event thread."""
        kazoo_client, events = self._kazoo, self._events
        if kazoo_client is None:
            return
        self._closing = True
        try:
            kazoo_client.stop()
        except Exception:
            log.exception("stopping the ZooKeeper session failed")
        finally:
            try:
                kazoo_client.close()
            except Exception:
                log.exception("closing the ZooKeeper client failed")
            self._kazoo = None
            self._events = None
            self._kazoo_watches.clear()
            self._connected.clear()
            if events is not None:
                events.stop(timeout_s=5.0)

    def __enter__(self) -> "ZkSession":
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    @property
    def session_id(self) -> int | None:
        """The current session's id, None while disconnected."""
        client_id = self._kazoo.client_id if self._kazoo is not None else None
        return client_id[0] if client_id else None

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def wait_connected(self, timeout_s: float) -> bool:
        """True once connected (e.g. after a session loss, before re-registering)."""
        return self._connected.wait(timeout_s)

    def on_session_lost(self, callback: Callable[[], Any]) -> None:
        """Call `callback()` (on the event thread) when the session expires: our
        ephemerals are gone. Not called for close(). kazoo then opens a new session
        by itself; see on_new_session."""
        self._session_lost_callbacks.append(callback)

    def on_new_session(self, callback: Callable[[int], Any]) -> None:
        """Call `callback(session_id)` (on the event thread) when a new session
        replaces a lost one: the time to re-register the broker."""
        self._new_session_callbacks.append(callback)

    def _on_kazoo_state(self, state: str) -> None:
        # Runs on kazoo's connection thread: record and hand off, never call ZooKeeper here.
        events = self._events
        if state == KazooState.CONNECTED:
            self._connected.set()
            client_id = self._kazoo.client_id if self._kazoo is not None else None
            session_id = client_id[0] if client_id else None
            with self._state_lock:
                previous, self._last_session_id = self._last_session_id, session_id
            if previous is not None and session_id is not None and session_id != previous and events is not None:
                log.warning("new ZooKeeper session 0x%x replaces lost session 0x%x", session_id, previous)
                for callback in list(self._new_session_callbacks):
                    events.submit(None, callback, session_id)
        elif state == KazooState.SUSPENDED:
            self._connected.clear()
            log.info("ZooKeeper connection suspended; kazoo is reconnecting")
        elif state == KazooState.LOST:
            self._connected.clear()
            if not self._closing and events is not None:
                log.warning("ZooKeeper session lost")
                for callback in list(self._session_lost_callbacks):
                    events.submit(None, callback)

    def _create_chroot(self) -> None:
        # kazoo expects the chroot to exist; Kafka creates it the same way, with a
        # short-lived session on the bare hosts.
        bootstrap = self._client_factory(hosts=self._hosts, timeout=self.session_timeout_ms / 1000.0,
                                         **self.security.kazoo_kwargs())
        try:
            bootstrap.start(timeout=self.connection_timeout_ms / 1000.0)
        except KazooTimeoutError:
            raise ZkTimeoutError(
                f"could not connect to ZooKeeper at {self._hosts} within {self.connection_timeout_ms} ms"
            ) from None
        try:
            bootstrap.ensure_path_async(self.chroot).get(timeout=self.request_timeout_ms / 1000.0)
        except Exception as error:
            raise translate(error, f"create chroot {self.chroot}") from error
        finally:
            bootstrap.stop()
            bootstrap.close()

    def _discard_after_failed_start(self) -> None:
        if self._kazoo is not None:
            try:
                self._kazoo.stop()
                self._kazoo.close()
            except Exception:
                pass
        self._kazoo = None
        if self._events is not None:
            self._events.stop(timeout_s=1.0)
            self._events = None

    # ---- requests: every one bounded by request_timeout_ms; reads retried across a reconnect -----------------

    def _client(self) -> KazooClient:
        kazoo_client = self._kazoo
        if kazoo_client is None:
            raise ZkClientClosedError("the ZooKeeper client is not started")
        return kazoo_client

    def _await(self, what: str, start_request: Callable[[KazooClient], Any], retry: bool = False) -> Any:
        """Send one request and wait for it, bounded by the request timeout.

        retry=True re-sends after a dropped connection, for requests that are safe
        to repeat (reads, unconditional idempotent writes)."""
        deadline = time.monotonic() + self.request_timeout_ms / 1000.0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ZkTimeoutError(f"{what}: no answer from ZooKeeper in time")
            try:
                return start_request(self._client()).get(timeout=remaining)
            except ZkError:
                raise
            except Exception as error:
                translated = translate(error, what)
                if (retry and type(translated) is ZkConnectionError
                        and deadline - time.monotonic() > 0):
                    # Wait for the reconnect rather than spinning on a dead connection.
                    self._connected.wait(min(1.0, max(0.0, deadline - time.monotonic())))
                    continue
                raise translated from error

    def get(self, path: str, watch: Callable | None = None) -> tuple[bytes, Any] | None:
        try:
            return self._await(f"get {path}", lambda zk: zk.get_async(path, watch), retry=True)
        except ZkNoNodeError:
            return None

    def stat(self, path: str, watch: Callable | None = None) -> Any:
        return self._await(f"exists {path}", lambda zk: zk.exists_async(path, watch), retry=True)

    def exists(self, path: str) -> bool:
        return self.stat(path) is not None

    def children(self, path: str) -> list[str] | None:
        try:
            return self._await(f"children of {path}", lambda zk: zk.get_children_async(path), retry=True)
        except ZkNoNodeError:
            return None

    def get_many(self, paths: Iterable[str]) -> dict[str, tuple[bytes, Any]]:
        """Read many znodes with pipelined requests; absent ones are left out."""
        paths = list(paths)
        client = self._client()
        pending = [(path, client.get_async(path)) for path in paths]
        deadline = time.monotonic() + self.request_timeout_ms / 1000.0
        found: dict[str, tuple[bytes, Any]] = {}
        for path, request in pending:
            try:
                found[path] = request.get(timeout=max(0.0, deadline - time.monotonic()))
            except kazoo_errors.NoNodeError:
                continue
            except Exception as error:
                translated = translate(error, f"get {path}")
                if type(translated) is ZkConnectionError:
                    # Fall back to one-by-one reads, which wait for the reconnect.
                    again = self.get(path)
                    if again is not None:
                        found[path] = again
                    continue
                raise translated from error
        return found

    def get_data_and_version(self, path: str) -> tuple[bytes | None, int]:
        """(data, znode version); (None, -1) when the znode does not exist. Empty data reads as None."""
        found = self.get(path)
        if found is None:
            return None, -1
        data, stat = found
        return (data or None), stat.version

    # ---- writes ----------------------------------------------------------------------------------------------

    def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
               makepath: bool = False) -> str:
        return self._await(
            f"create {path}",
            lambda zk: zk.create_async(path, data, acl=self.security.acl_for(path), ephemeral=ephemeral,
                                       sequence=sequence, makepath=makepath),
        )

    def create_if_absent(self, path: str, data: bytes = b"", makepath: bool = True) -> bool:
        try:
            self.create(path, data, makepath=makepath)
            return True
        except ZkNodeExistsError:
            return False

    def set(self, path: str, data: bytes, version: int = -1) -> Any:
        return self._await(f"set {path}", lambda zk: zk.set_async(path, data, version))

    def set_or_create(self, path: str, data: bytes) -> None:
        for _ in range(5):
            try:
                self.set(path, data)
                return
            except ZkNoNodeError:
                pass
            try:
                self.create(path, data, makepath=True)
                return
            except ZkNodeExistsError:
                pass  # created by someone else in between: set it
        raise ZkError(f"set or create {path}: raced with concurrent deletes")

    def conditional_update_path(self, path: str, data: bytes, expected_version: int) -> tuple[bool, int]:
        """Kafka's conditionalUpdatePath: write only if the znode is still at
        ``expected_version`` (-1: create it, only if absent); -> (written, new version)."""
        if expected_version < 0:
            try:
                self.create(path, data, makepath=True)
                return True, 0
            except ZkNodeExistsError:
                return False, -1
        try:
            return True, self.set(path, data, expected_version).version
        except (BadVersionError, ZkNoNodeError):
            return False, -1

    def delete(self, path: str, version: int = -1) -> bool:
        try:
            self._await(f"delete {path}", lambda zk: zk.delete_async(path, version))
            return True
        except ZkNoNodeError:
            return False

    def delete_recursive(self, path: str) -> None:
        # Our own walk instead of kazoo's recursive delete, whose calls have no timeout.
        for _ in range(5):
            children = self.children(path)
            if children is None:
                return
            for child in children:
                self.delete_recursive(f"{path}/{child}")
            try:
                self.delete(path)
                return
            except ZkNotEmptyError:
                pass  # a child appeared while we deleted the others; walk again
        raise ZkError(f"delete {path}: children keep appearing")

    # ---- multi-op transactions, and writes fenced on /controller_epoch ---------------------------------------

    def commit(self, what: str, build: Callable[[Any], None]) -> list[Any]:
        """Run a multi-op transaction; returns kazoo's per-op results (exception
        instances mark failed ops, RolledBackError the ones undone with them)."""

        def start_request(zk: KazooClient) -> Any:
            transaction = zk.transaction()
            build(transaction)
            return transaction.commit_async()

        return self._await(what, start_request)

    @staticmethod
    def first_failure(results: Sequence[Any]) -> tuple[int, BaseException] | None:
        for index, result in enumerate(results):
            if isinstance(result, BaseException) and not isinstance(
                result, (kazoo_errors.RolledBackError, kazoo_errors.RuntimeInconsistency)
            ):
                return index, result
        return None

    def fenced(self, what: str, expected_controller_epoch_zk_version: int,
               add_operation: Callable[[Any], None]) -> list[Any]:
        """One write guarded by a check on /controller_epoch's version, in a single
        transaction, as Kafka's controller does to fence a deposed controller."""

        def build(transaction: Any) -> None:
            transaction.check(zk_paths.CONTROLLER_EPOCH, expected_controller_epoch_zk_version)
            add_operation(transaction)

        results = self.commit(what, build)
        failure = self.first_failure(results)
        if failure is None:
            return results
        index, error = failure
        if index == 0:
            raise ControllerMovedError(
                f"{what}: /controller_epoch is no longer at version {expected_controller_epoch_zk_version}"
            )
        raise translate(error, what)

    def conditional_set(self, path: str, data: bytes, expected_zk_version: int,
                        expected_controller_epoch_zk_version: int | None) -> int:
        if expected_controller_epoch_zk_version is None:
            return self.set(path, data, expected_zk_version).version
        results = self.fenced(f"set {path}", expected_controller_epoch_zk_version,
                              lambda transaction: transaction.set_data(path, data, expected_zk_version))
        return results[1].version

    def fenced_set_or_create(self, parent: str, path: str, data: bytes,
                             expected_controller_epoch_zk_version: int) -> None:
        """Set or create `path` in a transaction fenced on the controller epoch (ControllerMovedError)."""
        self.create_if_absent(parent)
        for _ in range(5):
            try:
                self.fenced(f"set {path}", expected_controller_epoch_zk_version,
                            lambda transaction: transaction.set_data(path, data))
                return
            except ZkNoNodeError:
                pass
            try:
                self.fenced(f"create {path}", expected_controller_epoch_zk_version,
                            lambda transaction: transaction.create(path, data))
                return
            except ZkNodeExistsError:
                pass  # created by someone else in between: set it
        raise ZkError(f"set or create {path}: raced with concurrent deletes")

    # ---- watches: callbacks on the event thread --------------------------------------------------------------

    def watch_children(self, path: str, handle: WatchHandle, convert: Callable[[list[str]], Any],
                       callback: Callable[[Any], Any]) -> WatchHandle:
        self.create_if_absent(path)
        events = self._events
        if events is None:
            raise ZkClientClosedError("the ZooKeeper client is not started")

        def on_children(children: list[str]) -> bool | None:
            # On a kazoo thread: hand the callback to our event thread.
            if handle.cancelled:
                return False
            events.submit(handle, callback, convert(children))
            return None

        return self._install_watch(handle, f"watch children of {path}",
                                   lambda: ChildrenWatch(self._client(), path, on_children))

    def watch_data(self, path: str, handle: WatchHandle, convert: Callable[[bytes | None], Any],
                   callback: Callable[[Any], Any]) -> WatchHandle:
        events = self._events
        if events is None:
            raise ZkClientClosedError("the ZooKeeper client is not started")

        def on_data(data: bytes | None, _stat: Any) -> bool | None:
            # On a kazoo thread: hand the callback to our event thread.
            if handle.cancelled:
                return False
            try:
                value = convert(data)
            except Exception:
                log.exception("undecodable data at %s", path)
                return None
            events.submit(handle, callback, value)
            return None

        return self._install_watch(handle, f"watch {path}", lambda: DataWatch(self._client(), path, on_data))

    def _install_watch(self, handle: WatchHandle, what: str, make_watch: Callable[[], Any]) -> WatchHandle:
        # kazoo's watch recipes make their first read inline and retry it without
        # limit while disconnected. Run that on a helper thread so the caller waits
        # at most the request timeout; if it is still retrying then, the watch gets
        # established (and fires) once the connection is back.
        outcome: dict[str, Any] = {}
        done = threading.Event()

        def install() -> None:
            try:
                outcome["watch"] = make_watch()
            except BaseException as error:  # handed to the caller below
                outcome["error"] = error
            finally:
                done.set()

        threading.Thread(target=install, name=f"install {handle.description} watch", daemon=True).start()
        if not done.wait(self.request_timeout_ms / 1000.0):
            log.warning("%s: still waiting for ZooKeeper; the watch will start once it answers", what)
            return handle
        if "error" in outcome:
            raise translate(outcome["error"], what) from outcome["error"]
        self._kazoo_watches.append(outcome["watch"])
        return handle

    # ---- Kafka's persistent paths and their znode ACLs -------------------------------------------------------

    def ensure_persistent_paths(self) -> None:
        """Create Kafka's persistent top-level znodes (ZkData.PersistentZkPaths)."""
        for path in zk_paths.PERSISTENT_PATHS:
            if self.stat(path) is None:
                self.create_if_absent(path)
        if self.security.set_acl:
            # The ACL roots too, so that nobody else can create them (and the
            # ACLs in them) before an authorizer is configured.
            for path in zk_paths.ACL_ROOT_PATHS:
                if self.stat(path) is None:
                    self.create_if_absent(path, makepath=True)

    def secure_existing_paths(self) -> None:
        """zookeeper.set.acl on a cluster whose znodes were created without it
        (Kafka's zookeeper-security-migration, for what matters most): Kafka's
        ACLs on the persistent paths and their parents, and on everything under
        /config and the ACL paths, where credentials and ACLs live. Znodes that
        already carry other ACLs are left alone. `raykafka start` calls it once
        per start, before the broker's other sessions open."""
        roots = {zk_paths.CONFIG, *(p for p in zk_paths.ACL_ROOT_PATHS if p.count("/") == 1)}
        tops = set()
        for path in zk_paths.PERSISTENT_PATHS:
            parts = path.strip("/").split("/")
            tops.update("/" + "/".join(parts[:i + 1]) for i in range(len(parts)))
        for path in sorted(tops - roots):
            self._secure(path)
        for root in sorted(roots):
            self._secure_tree(root, limit=100_000)

    def _secure(self, path: str) -> bool:
        """Kafka's ACL on ``path`` if it is world-writable now; False if it does not exist."""
        from kazoo.security import OPEN_ACL_UNSAFE

        try:
            acls, stat = self._await(f"get acl {path}", lambda zk: zk.get_acls_async(path), retry=True)
        except ZkNoNodeError:
            return False
        if list(acls) == list(OPEN_ACL_UNSAFE):
            self._await(f"set acl {path}", lambda zk: zk.set_acls_async(path, self.security.acl_for(path),
                                                                        stat.aversion))
        return True

    def _secure_tree(self, root: str, limit: int) -> None:
        todo = [root]
        while todo and limit > 0:
            path = todo.pop()
            limit -= 1
            if self._secure(path):
                todo.extend(f"{path.rstrip('/')}/{child}" for child in (self.children(path) or ()))
