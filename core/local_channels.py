"""Direct channels (core.local_calls) from one actor to the other actors of its
node, opened on first use, with Ray's call as the way when there is none.

The edge calls its node's leader replicas once per produce request (or
coalesced group of them) and per consumer read, and its purgatory per parked
fetch or acks=all produce; a leader replica reports its progress to the
purgatory. As Ray calls those cost ~1.1-1.6 ms of CPU on each side; over a
socket ~0.15 ms.

The first call to an actor goes through Ray and starts, in the background,
one Ray call asking the actor for its socket (``local_call_endpoint()``: node
id, address, token, name, methods) and the connection. Until the channel is
up, for actors on other nodes, for methods the actor does not serve directly,
and for a while after a failed attempt, calls go through Ray, so nothing
waits for a channel.

A channel belongs to one actor incarnation: a new actor has a new Ray actor
id and gets a new channel; an actor Ray restarted (the purgatory, group
coordinators) keeps its id, so when its process dies the channel is lost
and, after a short pause, asked for again from the new process (calls go
through Ray meanwhile). ``keep_only`` closes the channels of actors the
caller no longer talks to.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Iterable

from core.local_calls import LocalCallClient, LocalCallTooLarge, current_host_id, current_node_id

log = logging.getLogger("raykafka.local_calls")

# After a failed or refused attempt, the channel to that actor is tried again this much later.
RETRY_AFTER_S = 30.0
# After a channel the callee's side dropped (its process died: Ray restarts
# it, with a new socket): ask again this much later. Short, or every call to a
# restarted purgatory would take Ray's ~10x dearer path for RETRY_AFTER_S.
RETRY_AFTER_LOST_S = 1.0
# ... but only for a channel that had worked this long: one dropped sooner (a
# callee refusing it, or dying again and again) waits RETRY_AFTER_S.
QUICK_RETRY_MIN_LIFE_S = 5.0


def actor_key(handle: Any) -> str:
    actor_id = getattr(handle, "_actor_id", None)
    return actor_id.hex() if actor_id is not None else f"object-{id(handle)}"


class LocalChannels:
    @classmethod
    def here(cls, enabled: bool, call_timeout_s: float) -> "LocalChannels":
        """Channels from an actor to the others of its node (none if not enabled)."""
        return cls(current_node_id() if enabled else None, call_timeout_s)

    @classmethod
    def on_host(cls, enabled: bool, call_timeout_s: float) -> "LocalChannels":
        """Channels from an actor to the others of its machine, whatever Ray
        node they run on (followers to their leaders: several Ray nodes may
        share a host). None are opened outside Ray or if not enabled."""
        return cls(current_host_id() if enabled and current_node_id() is not None else None,
                   call_timeout_s, scope="host")

    def __init__(self, node_id: str | None, call_timeout_s: float, scope: str = "node"):
        # Without a node id (logic driven without Ray, or turned off) no channel is opened.
        # With scope "host" it is the host id (core.local_calls.current_host_id).
        self.node_id = node_id
        self.scope = scope
        self.call_timeout_s = call_timeout_s
        self._clients: dict[str, LocalCallClient] = {}
        self._opening: dict[str, asyncio.Future] = {}
        self._retry_at: dict[str, float] = {}
        self._opened_at: dict[str, float] = {}
        self.counters = {"local_calls": 0, "ray_calls": 0, "channels_opened": 0, "channels_refused": 0}

    def call(self, handle: Any, method: str, args: tuple, timeout_s: float) -> asyncio.Future:
        """``handle.<method>(*args)``: over the channel when one is up (errors:
        LocalCallLost, LocalCallFailed, asyncio.TimeoutError), else through
        Ray (Ray's errors, asyncio.TimeoutError)."""
        future = self.call_local(handle, method, args, timeout_s)
        if future is not None:
            return future
        # No channel, or a request too large for one: Ray moves large arguments through its object store.
        self.counters["ray_calls"] += 1
        return asyncio.ensure_future(asyncio.wait_for(getattr(handle, method).remote(*args), timeout_s))

    def call_local(self, handle: Any, method: str, args: tuple, timeout_s: float,
                   later_timeout_s: float | None = None) -> asyncio.Future | None:
        """``call`` over the channel only, None when no channel is up or the
        request is too large for one. Only a channel carries a method that
        answers in two parts (core.local_calls.FollowUp); its second part is
        due within ``later_timeout_s`` (default ``timeout_s``)."""
        client = self.client(handle, method)
        if client is None:
            return None
        try:
            future = client.call(method, args, timeout_s, later_timeout_s)
        except LocalCallTooLarge:
            return None
        self.counters["local_calls"] += 1
        return future

    def client(self, handle: Any, method: str) -> LocalCallClient | None:
        """The open channel to the actor behind ``handle`` if it serves
        ``method``, or None: then the caller goes through Ray, and a channel is
        being opened if it can be."""
        if self.node_id is None:
            return None
        key = actor_key(handle)
        client = self._clients.get(key)
        if client is not None:
            if not client.closed:
                return client if method in client.methods else None
            # The same actor closed its socket (it is stopping, or refused the
            # connection) or its process died: Ray for a while, then ask again
            # (a failed ask waits RETRY_AFTER_S).
            del self._clients[key]
            now = time.monotonic()
            lived = now - self._opened_at.pop(key, now)
            quick = not client.closed_by_caller and lived >= QUICK_RETRY_MIN_LIFE_S
            self._retry_at[key] = now + (RETRY_AFTER_LOST_S if quick else RETRY_AFTER_S)
        if key not in self._opening and self._retry_at.get(key, 0.0) <= time.monotonic():
            self._opening[key] = asyncio.ensure_future(self._open(key, handle))
        return None

    async def _open(self, key: str, handle: Any) -> None:
        try:
            ask = handle.local_call_endpoint.remote("host") if self.scope == "host" else \
                handle.local_call_endpoint.remote()
            endpoint = await asyncio.wait_for(ask, self.call_timeout_s)
            if endpoint is None or endpoint[0] != self.node_id:
                # Closed, or on another node: its bytes would not be local anyway.
                self._retry_at[key] = time.monotonic() + RETRY_AFTER_S
                self.counters["channels_refused"] += 1
                return
            _node, address, token, name, methods = endpoint
            client = await LocalCallClient.connect(name, address, token, timeout_s=self.call_timeout_s)
            client.methods = frozenset(methods)
            if self._opening.get(key) is asyncio.current_task():  # not forgotten (closed) meanwhile
                self._clients[key] = client
                self._opened_at[key] = time.monotonic()
                self._retry_at.pop(key, None)
                self.counters["channels_opened"] += 1
            else:
                client.close()
        except Exception as exc:  # noqa: BLE001 - Ray, socket or timeout: Ray calls go on working
            log.warning("no direct channel to actor %s (%s: %s); calls go through Ray", key,
                        type(exc).__name__, str(exc).splitlines()[0][:200] if str(exc) else "")
            self._retry_at[key] = time.monotonic() + RETRY_AFTER_S
            self.counters["channels_refused"] += 1
        finally:
            if self._opening.get(key) is asyncio.current_task():
                del self._opening[key]

    def keep_only(self, handles: Iterable[Any]) -> None:
        """Close the channels (and forget attempts) of actors not among ``handles``."""
        keep = {actor_key(h) for h in handles if h is not None}
        for key in [k for k in self._clients if k not in keep]:
            self._clients.pop(key).close()
            self._opened_at.pop(key, None)
        for key in [k for k in self._opening if k not in keep]:
            self._opening.pop(key)  # its _open closes the client it gets
        for key in [k for k in self._retry_at if k not in keep]:
            del self._retry_at[key]

    def forget(self, handle: Any) -> None:
        """Close the channel of one actor that ended (a hibernated replica)."""
        key = actor_key(handle)
        client = self._clients.pop(key, None)
        if client is not None:
            client.close()
        self._opened_at.pop(key, None)
        self._opening.pop(key, None)
        self._retry_at.pop(key, None)

    def close(self) -> None:
        self.keep_only(())
