"""Creating a broker's named actors on its Ray node: the name reclaimed from
a dead incarnation, the purgatory's restart options, and finding every actor
the controller placed for a broker (to close them at shutdown)."""
from __future__ import annotations

import time

from node.errors import StartupError


def named_actors_of_broker(namespace: str, broker_id: int) -> list[str]:
    """Names of the detached actors the controller placed for one broker (its
    replicas and group coordinators, named `...@<broker id>`)."""
    import ray

    from core.naming import controller_actor_name, edge_actor_name, purgatory_actor_name

    own = {edge_actor_name(broker_id), controller_actor_name(broker_id), purgatory_actor_name(broker_id)}
    suffix = f"@{broker_id}"
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["namespace"] == namespace and a["name"].endswith(suffix) and a["name"] not in own]


def create_named(actor_class, name: str, namespace: str, options: dict, *args):
    """Create a named actor; a name still held by the dead incarnation of a
    restarted broker (its node just died) is reclaimed, within a bound."""
    import ray
    from ray.exceptions import ActorAlreadyExistsError

    deadline = time.monotonic() + 60
    while True:
        try:
            return actor_class.options(name=name, namespace=namespace, **options).remote(*args)
        except (ActorAlreadyExistsError, ValueError) as exc:
            if time.monotonic() > deadline:
                raise StartupError(f"actor name {name} is still taken: {exc}") from None
            try:
                ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
            except Exception:
                pass
            time.sleep(1)


def purgatory_options(scheduling_strategy) -> dict:
    # Ray restarts a dead purgatory on its node, under the same actor id, so
    # every handle to it (the edges', replicas' and coordinators') stays
    # valid; it keeps nothing that must outlive its process.
    return dict(num_cpus=0, max_concurrency=100_000, scheduling_strategy=scheduling_strategy, max_restarts=-1)


def edge_options(ray_node_id: str) -> dict:
    """An edge's actor options: pinned to its broker's Ray node."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return dict(num_cpus=0, max_concurrency=10_000,
                scheduling_strategy=NodeAffinitySchedulingStrategy(ray_node_id, soft=False))
