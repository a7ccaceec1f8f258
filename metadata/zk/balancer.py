"""The balancer's znodes (ours, not Kafka's): /balancer/paused, which an
operator creates to pause it, and /balancer/state, what the active controller
last published."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from metadata import zk_paths
from metadata.zk.payloads import decode_json, encode_json
from metadata.zk.events import WatchHandle
from metadata.zk.session import ZkSession


class BalancerZk:
    """/balancer/paused and /balancer/state (issue 31): the balancer's switch and plan."""

    def __init__(self, session: ZkSession):
        self._session = session

    def paused(self) -> bool:
        return self._session.stat(zk_paths.BALANCER_PAUSED) is not None

    def set_paused(self, paused: bool, reason: str = "") -> bool:
        """Pause (create /balancer/paused) or resume (delete it); True if it changed."""
        if paused:
            return self._session.create_if_absent(zk_paths.BALANCER_PAUSED,
                                                  encode_json({"version": 1, "reason": reason}))
        return self._session.delete(zk_paths.BALANCER_PAUSED)

    def watch_paused(self, callback: Callable[[bool], Any]) -> WatchHandle:
        """callback(paused) now and whenever /balancer/paused appears or goes."""
        return self._session.watch_data(zk_paths.BALANCER_PAUSED, WatchHandle("balancer_paused"),
                                        lambda data: data is not None, callback)

    def state(self) -> dict[str, Any] | None:
        """What the active controller last published (cluster/controller/balancer.py); None if never."""
        found = self._session.get(zk_paths.BALANCER_STATE)
        return None if found is None or not found[0] else decode_json(found[0])

    def set_state(self, state: Mapping[str, Any], *,
                  expected_controller_epoch_zk_version: int | None = None) -> None:
        """Write /balancer/state; fenced on the controller epoch (ControllerMovedError) when given."""
        data = encode_json(dict(state))
        path = zk_paths.BALANCER_STATE
        if expected_controller_epoch_zk_version is None:
            self._session.set_or_create(path, data)
            return
        self._session.fenced_set_or_create(zk_paths.BALANCER, path, data, expected_controller_epoch_zk_version)
