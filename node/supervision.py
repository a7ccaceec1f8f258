"""Supervision of a running broker's processes: every edge and purgatory
this process started is watched (a pending park() call, which fails when the
actor's process dies); a dead edge is replaced and a purgatory Ray gave up on
is created again, when node/restart_policy.py says so.

Why the starting process supervises rather than Ray's max_restarts: see
node/restart_policy.py.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from core.config import BrokerConfig
from core.naming import edge_actor_name, edge_sibling_actor_name, purgatory_actor_name
from core.security_config import rebind_first
from node.errors import StartupError, quietly
from node.named_actors import create_named, edge_options, purgatory_options
from node.restart_policy import Action, RestartPolicy

log = logging.getLogger("raykafka")

# Bounds on replacing a dead edge: its start (bind, ZooKeeper registration)
# and its first metadata from the controller.
REPLACE_START_TIMEOUT_S = 30
REPLACE_READY_TIMEOUT_S = 30
# How long the supervisor waits for Ray to bring a restarted purgatory back.
RESTART_WAIT_S = 30


class Supervisor:
    """Watches the brokers in `nodes` (node/process.py's list, shared: a
    replacement updates the broker's entry in place) and replaces what died."""

    def __init__(self, config: BrokerConfig, zk_connect: str, nodes: list[dict], stopping: threading.Event,
                 on_replaced: Callable[[], None]):
        self._config = config
        self._zk_connect = zk_connect
        self._nodes = nodes
        self._stopping = stopping
        self._on_replaced = on_replaced
        # A pending park() call per watched actor, keyed (broker id, "edge", k)
        # (k = 0 the primary, k >= 1 a sibling) or (broker id, "purgatory", 0).
        self._watches: dict[tuple, object] = {}
        self.restarts = RestartPolicy()

    def forget_broker(self, broker_id: int) -> None:
        """A broker started again from scratch (a revived node): its old watches and deaths are void."""
        for key in [k for k in self._watches if k[0] == broker_id]:
            del self._watches[key]
        for key in [k for k in self.restarts.pending() if k[0] == broker_id]:
            self.restarts.forget(key)

    def watch(self, node: dict) -> None:
        """Watch a started broker's edges and purgatory."""
        broker_id = node["broker_id"]
        for k, edge in enumerate([node["_edge"], *node["_edge_siblings"]]):
            self._watches[(broker_id, "edge", k)] = edge.park.remote()
        self._watches[(broker_id, "purgatory", 0)] = node["_purgatory"].park.remote()

    def supervise(self) -> None:
        """One round: note the watched actors that died, replace those due."""
        import ray

        if self._watches:
            refs = {ref: key for key, ref in self._watches.items()}
            ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
            for ref in ready:
                key = refs[ref]
                del self._watches[key]
                try:
                    ray.get(ref, timeout=0)
                    log.warning("%s's park() returned; watching it again", describe(key))
                    self._watches[key] = self._watched_handle(key).park.remote()
                except Exception as exc:
                    log.warning("%s died (%s)", describe(key), type(exc).__name__)
                    self.restarts.died(key, time.monotonic())
        # Primaries before siblings: a replaced sibling is handed to its primary.
        for key in sorted(self.restarts.pending(), key=lambda k: (k[0], k[1] != "purgatory", k[2])):
            node = self._node(key[0])
            if node is None:
                self.restarts.forget(key)
                continue
            decision = self.restarts.decide(key, time.monotonic(), self._node_alive(node),
                                            self._stopping.is_set())
            if decision.action is Action.LEAVE:
                log.warning("not replacing %s: %s", describe(key), decision.reason)
                self.restarts.forget(key)
            elif decision.action is Action.REPLACE:
                started = time.monotonic()
                try:
                    if key[1] == "purgatory":
                        self._recover_purgatory(node)
                    elif key[2] == 0:
                        self._replace_edge(node)
                    else:
                        self._replace_sibling(node, key[2])
                except Exception as exc:
                    due = self.restarts.died(key, time.monotonic())
                    log.error("replacing %s failed (%s); next try in %.1f s", describe(key),
                              str(exc).splitlines()[0][:300] if str(exc) else repr(exc), due - time.monotonic())
                    continue
                self.restarts.replaced(key)
                self._watches[key] = self._watched_handle(key).park.remote()
                self._on_replaced()
                log.info("%s is back (%s) in %.0f ms", describe(key), decision.reason,
                         (time.monotonic() - started) * 1000)

    def _node(self, broker_id: int) -> dict | None:
        return next((n for n in self._nodes if n["broker_id"] == broker_id), None)

    def _watched_handle(self, key: tuple):
        node = self._node(key[0])
        if key[1] == "purgatory":
            return node["_purgatory"]
        return node["_edge"] if key[2] == 0 else node["_edge_siblings"][key[2] - 1]

    def _node_alive(self, node: dict) -> bool:
        """Whether the broker's Ray node is up (its raylet, when this process
        started it, else Ray's view)."""
        import psutil
        import ray

        pid = node.get("raylet_pid")
        if pid is not None and not (psutil.pid_exists(pid) and
                                    psutil.Process(pid).status() != psutil.STATUS_ZOMBIE):
            return False
        return any(n.get("NodeID") == node["ray_node_id"] and n.get("Alive") for n in ray.nodes())

    def _replace_edge(self, node: dict) -> None:
        """A new primary edge for a broker whose edge process died: same name,
        same broker id, the port the dead one had bound; it deletes the dead
        one's ZooKeeper registration, and the controller re-admits the broker
        when the new one appears."""
        import ray

        from actors.edge import EdgeActorRemote

        broker_id, namespace = node["broker_id"], self._config["raykafka.namespace"]
        dead = node["_edge"]
        config = node["_config"].with_values({"listeners": rebind_first(node["_config"]["listeners"],
                                                                        node["bound_port"])})
        edge = create_named(EdgeActorRemote, edge_actor_name(broker_id), namespace,
                            edge_options(node["ray_node_id"]), broker_id, config, self._zk_connect,
                            node["log_dirs"], node["_purgatory"])
        try:
            host, port = ray.get(edge.start.remote(dead._actor_id.hex()), timeout=REPLACE_START_TIMEOUT_S)
            pid = ray.get(edge.pid.remote(), timeout=REPLACE_START_TIMEOUT_S)
            if node["_edge_siblings"]:
                ray.get(edge.set_siblings.remote(node["_edge_siblings"]), timeout=REPLACE_START_TIMEOUT_S)
            if not ray.get(edge.wait_ready.remote(REPLACE_READY_TIMEOUT_S), timeout=REPLACE_READY_TIMEOUT_S + 5):
                raise StartupError(f"the replacement edge of broker {broker_id} got no metadata in time")
        except Exception:
            quietly(lambda: ray.kill(edge, no_restart=True))
            raise
        node.update(_edge=edge, edge_pid=pid, host=host, port=port)
        node["edge_pids"][0] = pid

    def _replace_sibling(self, node: dict, k: int) -> None:
        import ray

        from actors.edge import EdgeActorRemote

        broker_id, namespace = node["broker_id"], self._config["raykafka.namespace"]
        sibling = create_named(EdgeActorRemote, edge_sibling_actor_name(broker_id, k), namespace,
                               edge_options(node["ray_node_id"]), broker_id, node["_config"], self._zk_connect,
                               node["log_dirs"], node["_purgatory"])
        try:
            pid = ray.get(sibling.start_sibling.remote(node["bound_port"], node["host"], node["port"]),
                          timeout=REPLACE_START_TIMEOUT_S)
        except Exception:
            quietly(lambda: ray.kill(sibling, no_restart=True))
            raise
        node["_edge_siblings"][k - 1] = sibling
        node["edge_pids"][k] = pid
        # The primary forwards its latest metadata to the new sibling (if the
        # primary is itself being replaced, its replacement does).
        try:
            ray.get(node["_edge"].set_siblings.remote(node["_edge_siblings"]), timeout=REPLACE_START_TIMEOUT_S)
        except Exception as exc:
            log.warning("broker %d: handing the new edge %d to the primary failed: %r", broker_id, k, exc)

    def _recover_purgatory(self, node: dict) -> None:
        """Ray restarts the purgatory (max_restarts=-1): wait for it and note
        its pid. If Ray gave up on it (killed for good), a new one is created
        and handed to the edges; replicas and coordinators look it up by name."""
        import ray
        from ray.exceptions import ActorDiedError

        from actors.purgatory import PurgatoryActorRemote

        try:
            node["purgatory_pid"] = ray.get(node["_purgatory"].pid.remote(), timeout=RESTART_WAIT_S)
            return
        except ActorDiedError:
            pass
        broker_id, namespace = node["broker_id"], self._config["raykafka.namespace"]
        log.warning("the purgatory of broker %d is gone for good: creating a new one", broker_id)
        opts = purgatory_options(edge_options(node["ray_node_id"])["scheduling_strategy"])
        purgatory = create_named(PurgatoryActorRemote, purgatory_actor_name(broker_id), namespace, opts,
                                 broker_id, namespace)
        node["purgatory_pid"] = ray.get(purgatory.pid.remote(), timeout=RESTART_WAIT_S)
        node["_purgatory"] = purgatory
        for edge in [node["_edge"], *node["_edge_siblings"]]:
            quietly(lambda: ray.get(edge.set_purgatory.remote(purgatory), timeout=REPLACE_START_TIMEOUT_S))


def describe(key: tuple) -> str:
    broker_id, role, k = key
    if role == "purgatory":
        return f"the purgatory of broker {broker_id}"
    return f"the edge of broker {broker_id}" if k == 0 else f"edge {k} of broker {broker_id}"
