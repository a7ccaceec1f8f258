"""Broker registrations: /brokers/ids/<id> and /brokers/seqid (Kafka's BrokerIdsZNode,
BrokerIdZNode and BrokerSequenceIdZNode)."""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Mapping

from metadata import zk_paths
from metadata.zk.errors import BadVersionError, BrokerIdInUseError, ZkError, ZkNoNodeError, ZkNodeExistsError
from metadata.zk.payloads import DEFAULT_RESERVED_BROKER_MAX_ID, broker_registration_json, decode_json, encode_json
from metadata.zk.events import WatchHandle
from metadata.zk.session import ZkSession

log = logging.getLogger(__name__)


class BrokersZk:
    """/brokers/ids/<id> (ephemeral registrations) and /brokers/seqid (generated ids)."""

    def __init__(self, session: ZkSession):
        self._session = session

    def register(
        self,
        broker_id: int,
        host: str,
        port: int,
        rack: str | None = None,
        extra: Mapping[str, Any] | None = None,
        *,
        wait_for_stale_s: float | None = None,
        replace_stale: Callable[[dict[str, Any]], bool] | None = None,
        security: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Create the ephemeral /brokers/ids/<id>; returns the JSON written.

        A registration left by a session that died without closing (kill -9)
        stays until ZooKeeper expires it, so by default we wait up to one session
        timeout (plus a little, since expiry is checked once per tick) for it to go.
        Raises BrokerIdInUseError if it is still held by another session then.

        ``replace_stale``: for a caller that knows the previous holder is dead
        (the supervisor replacing an edge whose process died): a registration
        owned by another session for which it answers True (given that
        registration's JSON) is deleted at once instead of waited for. The
        delete is conditional on the znode's version, so a registration that
        changed in between is looked at again."""
        path = zk_paths.broker_path(broker_id)
        body = broker_registration_json(broker_id, host, port, rack, extra, security=security)
        data = encode_json(body)
        if wait_for_stale_s is None:
            wait_for_stale_s = self._session.session_timeout_ms / 1000.0 + 3.0
        deadline = time.monotonic() + wait_for_stale_s
        self._session.create_if_absent(zk_paths.BROKER_IDS)
        while True:
            try:
                self._session.create(path, data, ephemeral=True)
                log.info("registered broker %d at %s:%d", broker_id, host, port)
                return body
            except ZkNodeExistsError:
                pass
            gone = threading.Event()
            stat = self._session.stat(path, watch=lambda event: gone.set())
            if stat is None:
                continue
            if stat.ephemeralOwner == self._session.session_id:
                # Our own create whose answer was lost with a dropped connection.
                self._session.set(path, data)
                return body
            if replace_stale is not None and self._delete_stale_registration(path, stat, replace_stale):
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerIdInUseError(broker_id, stat.ephemeralOwner)
            log.info(
                "broker id %d is still registered by session 0x%x; waiting up to %.1f s for it to expire",
                broker_id, stat.ephemeralOwner, remaining,
            )
            gone.wait(remaining)

    def _delete_stale_registration(self, path: str, stat: Any,
                                   replace_stale: Callable[[dict[str, Any]], bool]) -> bool:
        """Delete the registration at ``path`` (held by another session, as of
        ``stat``) if ``replace_stale`` says it is a dead holder's; True if the
        caller should try to create again."""
        found = self._session.get(path)
        if found is None:
            return True  # gone meanwhile
        raw, current = found
        if current.ephemeralOwner != stat.ephemeralOwner or current.ephemeralOwner == self._session.session_id:
            return True  # changed hands meanwhile: look again
        try:
            existing = decode_json(raw)
        except Exception:  # noqa: BLE001 - not ours to judge: wait for it as for any other holder
            return False
        if not isinstance(existing, dict) or not replace_stale(existing):
            return False
        try:
            self._session.delete(path, current.version)
        except BadVersionError:
            return True
        log.info("deleted %s left by dead session 0x%x", path, current.ephemeralOwner)
        return True

    def deregister(self, broker_id: int) -> bool:
        """Delete /brokers/ids/<id> if this session owns it (a controlled shutdown)."""
        path = zk_paths.broker_path(broker_id)
        stat = self._session.stat(path)
        if stat is None or stat.ephemeralOwner != self._session.session_id:
            return False
        try:
            return self._session.delete(path, stat.version)
        except BadVersionError:
            return False

    def get(self, broker_id: int) -> dict[str, Any] | None:
        found = self._session.get(zk_paths.broker_path(broker_id))
        return None if found is None else decode_json(found[0])

    def ids(self) -> list[int]:
        return sorted(int(child) for child in (self._session.children(zk_paths.BROKER_IDS) or []))

    def all(self) -> dict[int, dict[str, Any]]:
        """Every registered broker's JSON, by id."""
        return {
            int(path.rsplit("/", 1)[1]): decode_json(data)
            for path, (data, _stat) in self._session.get_many(zk_paths.broker_path(i) for i in self.ids()).items()
        }

    def watch(self, callback: Callable[[list[int]], Any]) -> WatchHandle:
        """callback(sorted live broker ids) now and on every change, on the event thread."""
        return self._session.watch_children(
            zk_paths.BROKER_IDS, WatchHandle("brokers"),
            lambda children: sorted(int(child) for child in children), callback,
        )

    def generate_id(self, reserved_max: int = DEFAULT_RESERVED_BROKER_MAX_ID) -> int:
        """Kafka's broker.id.generation: reserved_max + the version /brokers/seqid
        reaches after an unconditional setData, so ids are unique and > reserved_max."""
        for _ in range(3):
            try:
                stat = self._session.set(zk_paths.BROKER_SEQUENCE_ID, b"")
                return reserved_max + stat.version
            except ZkNoNodeError:
                self._session.create_if_absent(zk_paths.BROKER_SEQUENCE_ID)
        raise ZkError("generate broker id: /brokers/seqid keeps disappearing")
