"""Controller election: the ephemeral /controller znode and /controller_epoch
(Kafka's ControllerZNode and ControllerEpochZNode), whose zk version fences
every write of a deposed controller (ZkSession.fenced)."""
from __future__ import annotations

import logging
from typing import Any, Callable

from kazoo import exceptions as kazoo_errors

from metadata import zk_paths
from metadata.zk.errors import BadVersionError, ZkConnectionError, ZkError, translate
from metadata.zk.payloads import CONTROLLER_ZNODE_VERSION, INITIAL_CONTROLLER_EPOCH, decode_json, encode_json, now_ms
from metadata.zk.events import WatchHandle
from metadata.zk.session import ZkSession

log = logging.getLogger(__name__)


class ControllerZk:
    """/controller (who is controller) and /controller_epoch (the fencing epoch)."""

    def __init__(self, session: ZkSession):
        self._session = session

    def try_elect(self, broker_id: int) -> int | None:
        """Kafka's controller election: create the ephemeral /controller and bump
        /controller_epoch in one transaction, so the epoch moves exactly once per
        elected controller. Returns the new epoch, or None if another live session
        is controller."""
        data = encode_json({"version": CONTROLLER_ZNODE_VERSION, "brokerid": broker_id, "timestamp": str(now_ms())})
        for _ in range(10):
            current = self.epoch()
            if current is None:
                self._session.create_if_absent(zk_paths.CONTROLLER_EPOCH, str(INITIAL_CONTROLLER_EPOCH).encode())
                continue
            epoch, epoch_zk_version = current
            new_epoch = epoch + 1

            def build(transaction: Any) -> None:
                transaction.create(zk_paths.CONTROLLER, data, ephemeral=True)
                transaction.set_data(zk_paths.CONTROLLER_EPOCH, str(new_epoch).encode(), epoch_zk_version)

            try:
                results = self._session.commit("elect controller", build)
            except ZkConnectionError:
                # The transaction may have been applied before the connection dropped;
                # the owner check below tells.
                if self._controller_owned_by_me():
                    return self._current_epoch_value()
                raise
            failure = self._session.first_failure(results)
            if failure is None:
                log.info("broker %d is the controller, epoch %d", broker_id, new_epoch)
                return new_epoch
            index, error = failure
            if index == 0 and isinstance(error, kazoo_errors.NodeExistsError):
                if self._controller_owned_by_me():
                    # Won in an earlier attempt whose answer was lost.
                    return self._current_epoch_value()
                return None
            if index == 1 and isinstance(error, kazoo_errors.BadVersionError):
                continue  # the epoch moved (an election came and went); read it again
            if index == 1 and isinstance(error, kazoo_errors.NoNodeError):
                continue
            raise translate(error, "elect controller")
        raise ZkError("elect controller: /controller_epoch kept changing")

    def _controller_owned_by_me(self) -> bool:
        stat = self._session.stat(zk_paths.CONTROLLER)
        return stat is not None and stat.ephemeralOwner == self._session.session_id

    def _current_epoch_value(self) -> int | None:
        current = self.epoch()
        return None if current is None else current[0]

    def epoch(self) -> tuple[int, int] | None:
        """(epoch, zk version) of /controller_epoch, None before the first election.
        The zk version is what expected_controller_epoch_zk_version fences on."""
        found = self._session.get(zk_paths.CONTROLLER_EPOCH)
        if found is None:
            return None
        data, stat = found
        return int(data.decode("ascii").strip()), stat.version

    def id(self) -> int | None:
        found = self._session.get(zk_paths.CONTROLLER)
        return None if found is None else _controller_id_from(found[0])

    def watch(self, callback: Callable[[int | None], Any]) -> WatchHandle:
        """callback(controller broker id, or None when there is none) now and on every
        change, on the event thread. A None is the cue for candidates to re-run
        try_become_controller."""
        return self._session.watch_data(zk_paths.CONTROLLER, WatchHandle("controller"), _controller_id_from, callback)

    def resign(self) -> bool:
        """Delete /controller if this session holds it; True if it did."""
        stat = self._session.stat(zk_paths.CONTROLLER)
        if stat is None or stat.ephemeralOwner != self._session.session_id:
            return False
        try:
            return self._session.delete(zk_paths.CONTROLLER, stat.version)
        except BadVersionError:
            return False

    def znode(self) -> tuple[int, int, int] | None:
        """(controller broker id, ephemeralOwner session id, zk version) of
        /controller, None when no controller is elected."""
        found = self._session.get(zk_paths.CONTROLLER)
        if found is None:
            return None
        data, stat = found
        return _controller_id_from(data), stat.ephemeralOwner, stat.version

    def delete_if(self, owner_session_id: int, broker_id: int) -> bool:
        """Delete /controller only if it is still the znode that `broker_id`'s
        session `owner_session_id` created; True if this call deleted it.

        Why: Ray reports an actor's process dead at once, while ZooKeeper keeps
        the dead controller's ephemeral /controller until its session times out
        (zookeeper.session.timeout.ms). Deleting it then lets the surviving
        brokers elect a new controller without that wait. Kafka itself waits.

        Why this is safe:
        - Only that exact znode goes. ZooKeeper cannot check an ephemeralOwner in
          a transaction, and every /controller has zk version 0, so the version
          alone cannot tell one election's znode from the next. But every
          election creates /controller and bumps /controller_epoch in one
          transaction, and no election commits while a /controller exists. So
          we read /controller, then /controller_epoch, then /controller again:
          if it is the same znode both times (same czxid), the epoch version read
          belongs to its election, and a transaction "check /controller_epoch at
          that version; delete /controller at its version" deletes that znode
          or nothing (a newer controller moved the epoch version on).
        - Controller fencing is unchanged: a zombie controller (the process was
          not dead after all) still writes through /controller_epoch version
          checks, which fail once a successor is elected, and it learns it lost
          /controller from its watch.
        A ZkConnectionError means the outcome is unknown; calling again answers
        False if the znode is gone either way."""
        first = self._session.get(zk_paths.CONTROLLER)
        if first is None:
            return False
        data, stat = first
        if stat.ephemeralOwner != owner_session_id or _controller_id_from(data) != broker_id:
            return False
        epoch = self._session.stat(zk_paths.CONTROLLER_EPOCH)
        again = self._session.stat(zk_paths.CONTROLLER)
        if epoch is None or again is None or again.czxid != stat.czxid:
            return False

        def build(transaction: Any) -> None:
            transaction.check(zk_paths.CONTROLLER_EPOCH, epoch.version)
            transaction.delete(zk_paths.CONTROLLER, stat.version)

        results = self._session.commit("delete /controller", build)
        failure = self._session.first_failure(results)
        if failure is None:
            log.info("deleted /controller of broker %d (session 0x%x)", broker_id, owner_session_id)
            return True
        _index, error = failure
        if isinstance(error, (kazoo_errors.BadVersionError, kazoo_errors.NoNodeError)):
            return False
        raise translate(error, "delete /controller")


def _controller_id_from(data: bytes | None) -> int | None:
    if not data:
        return None
    text = data.decode("utf-8").strip()
    # Kafka before 0.9 wrote a bare integer; later versions write JSON.
    if text.lstrip("-").isdigit():
        return int(text)
    return int(decode_json(data)["brokerid"])
