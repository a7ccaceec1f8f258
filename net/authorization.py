"""The one way handlers ask whether a request may do something (issue 21
part 4): `await authorize(ctx, Operation.READ, ResourceType.TOPIC, name)`,
`await authorized(ctx, op, type, names)` for a batch. Without
authorizer.class.name every request is allowed, as before.

The edge's AclAuthorizer and its ZooKeeper store (cluster/security/) are made
on the first request that needs them; the store connects and loads the ACLs
in an executor, never on the event loop, and keeps them current on a thread
of its own. The principal is the connection's (net/listeners.py,
User:ANONYMOUS on PLAINTEXT), the host its peer address."""
from __future__ import annotations

import asyncio
import logging
from typing import Iterable

from cluster.security.acls import CLUSTER_NAME, Operation, ResourceType
from cluster.security.authorizer import AUTHORIZER_CLASS_NAMES, AclAuthorizer, ZkAclStore, parse_super_users
from core.error_codes import ErrorCode

log = logging.getLogger("raykafka.authorization")

ANONYMOUS = "User:ANONYMOUS"

__all__ = ["Operation", "ResourceType", "CLUSTER_NAME", "enabled", "acl_store", "authorize", "authorized",
           "authorize_cluster", "authorize_by_resource_type", "principal_and_host"]


def enabled(edge) -> bool:
    config = getattr(edge, "config", None)  # unit tests' stand-in edges may have none
    name = config.get("authorizer.class.name") if hasattr(config, "get") else None
    return name in AUTHORIZER_CLASS_NAMES


def principal_and_host(ctx) -> tuple[str, str]:
    conn = ctx.conn
    if conn is None:
        return ANONYMOUS, "*"
    peer = getattr(conn, "peer", "") or ""
    return getattr(conn, "principal", None) or ANONYMOUS, peer.rsplit(":", 1)[0].strip("[]")


async def acl_store(edge) -> ZkAclStore | None:
    """The edge's started ACL store; None without an authorizer. Raises when
    ZooKeeper cannot be reached (the next request tries again)."""
    if not enabled(edge):
        return None
    store = getattr(edge, "acl_store", None)
    if store is not None:
        return store
    starting = getattr(edge, "acl_store_starting", None)
    if starting is None or (starting.done() and starting.exception() is not None):
        config = edge.config
        authorizer = AclAuthorizer(parse_super_users(config.get("super.users")),
                                   bool(config.get("allow.everyone.if.no.acl.found", False)))
        zk = getattr(edge, "zk", None)  # the edge process's one ZooKeeper client
        if zk is None:
            raise RuntimeError("this edge has no ZooKeeper client yet")
        store = ZkAclStore(zk, authorizer)
        starting = edge.acl_store_starting = asyncio.get_running_loop().run_in_executor(None, store.start)
    store = await asyncio.shield(starting)
    edge.acl_store = store
    return store


async def _authorizer(ctx) -> AclAuthorizer | None:
    """None: everything allowed. A store that cannot start denies (fails closed)."""
    edge = ctx.edge
    if not enabled(edge):
        return None
    store = getattr(edge, "acl_store", None)
    if store is None:
        try:
            store = await acl_store(edge)
        except Exception as exc:
            log.warning("ACLs could not be loaded from ZooKeeper: %s", exc)
            # No ACLs known: only super users are allowed until ZooKeeper answers.
            return AclAuthorizer(parse_super_users(edge.config.get("super.users")))
    return store.authorizer


async def authorize(ctx, operation: Operation, resource_type: ResourceType, name: str) -> bool:
    authorizer = await _authorizer(ctx)
    if authorizer is None:
        return True
    principal, host = principal_and_host(ctx)
    return authorizer.authorize(principal, host, operation, resource_type, name)


async def authorize_cluster(ctx, operation: Operation) -> bool:
    return await authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


async def authorized(ctx, operation: Operation, resource_type: ResourceType, names: Iterable[str]) -> set[str]:
    """The names of `names` the request may do `operation` on."""
    names = set(names)
    authorizer = await _authorizer(ctx)
    if authorizer is None:
        return names
    principal, host = principal_and_host(ctx)
    return {n for n in names if authorizer.authorize(principal, host, operation, resource_type, n)}


async def authorize_by_resource_type(ctx, operation: Operation, resource_type: ResourceType) -> bool:
    authorizer = await _authorizer(ctx)
    if authorizer is None:
        return True
    principal, host = principal_and_host(ctx)
    return authorizer.authorize_by_resource_type(principal, host, operation, resource_type)


async def checker(ctx):
    """A synchronous `may(operation, resource_type, name) -> bool` over one
    snapshot of the ACLs, for handlers that must decide inside a loop
    without awaiting (Produce issues its appends before its first await)."""
    authorizer = await _authorizer(ctx)
    if authorizer is None:
        return _allow_all
    principal, host = principal_and_host(ctx)

    def may(operation: Operation, resource_type: ResourceType, name: str) -> bool:
        return authorizer.authorize(principal, host, operation, resource_type, name)

    return may


def _allow_all(_operation, _resource_type, _name) -> bool:
    return True


async def answer(value):
    """An already known answer where a handler gathers awaitables (a denied partition)."""
    return value


# ConfigResource types (DescribeConfigs / AlterConfigs): broker and broker
# logger configs are the cluster's, checked on the cluster resource.
CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER = 2, 4, 8


def config_denial(may, operation: Operation, config_resource_type: int, name: str):
    """Kafka's check of a config resource (DESCRIBE_CONFIGS / ALTER_CONFIGS):
    the error when `may` refuses it, else None."""
    if config_resource_type == CONFIG_TOPIC:
        return None if may(operation, ResourceType.TOPIC, name) else ErrorCode.topic_authorization_failed
    if config_resource_type in (CONFIG_BROKER, CONFIG_BROKER_LOGGER):
        return None if may(operation, ResourceType.CLUSTER, CLUSTER_NAME) else ErrorCode.cluster_authorization_failed
    return None


def operations_field(may, resource_type: ResourceType, name: str) -> int:
    """KIP-430's authorized operations of a resource: a bit per operation code
    the principal may do, over the operations Kafka supports on that type
    (all of them without an authorizer, as Kafka answers)."""
    from cluster.security.acls import SUPPORTED_OPERATIONS

    return sum(1 << int(op) for op in SUPPORTED_OPERATIONS[resource_type] if may(op, resource_type, name))
