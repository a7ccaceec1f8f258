"""Keep CPython's full garbage collections off a broker process's hot path.

A broker process (an edge, a replica) imports and builds ~60,000-95,000
long-lived objects at start (modules, Kafka's message schemas, Ray's client)
and keeps them for its life. A full (generation 2) collection walks all of
them: measured in the replicated-writes bench (bench/PROFILE.md), an edge's
full collections took 39-550 ms each with the cores busy, and every request
in flight on that edge waited for it: enough to set the p99 of a paced
acks=all phase. ``gc.freeze()`` moves what exists at that moment into the
permanent generation, which collections skip; what the process allocates
afterwards is collected as usual. This is what the CPython docs recommend
for long-running servers with a large start-up heap (gc.freeze).
"""
from __future__ import annotations

import gc


def freeze_startup_heap(collect: bool = False) -> int:
    """Exclude everything allocated so far from future collections; ``collect``
    first frees start-up garbage (tens of ms: only where nothing waits on it).
    -> the number of objects frozen so far."""
    if collect:
        gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
