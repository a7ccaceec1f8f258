"""UpdateMetadata as deltas: the controller's rounds (cluster/controller/metadata_rounds.py)
and the edge's application of them (net/metadata_updates.py, net/metadata_cache.py)."""
from __future__ import annotations

import random
import uuid

from cluster.controller.channel import ReplicaKey
from cluster.controller.metadata_rounds import MetadataRounds
from core.controller_messages import (BrokerEndpoint, MetadataApplied, MetadataDelta, MetadataSnapshot,
                                      PartitionSnapshot, TopicSnapshot)
from core.error_codes import ErrorCode
from net.metadata_cache import MetadataCache
from net.metadata_updates import HeldMetadata, resolve_update

BROKERS = (BrokerEndpoint(1, "h", 1), BrokerEndpoint(2, "h", 2))
TOPIC_IDS: dict[str, str] = {}


def topic(name: str, leaders: list[int], epoch: int = 0) -> TopicSnapshot:
    topic_id = TOPIC_IDS.setdefault(name, str(uuid.uuid4()))
    return TopicSnapshot(topic_id, {p: PartitionSnapshot(leader, epoch, (1, 2), (1, 2))
                                    for p, leader in enumerate(leaders)})


def snapshot(topics: dict, epoch: int = 1, brokers=BROKERS) -> MetadataSnapshot:
    return MetadataSnapshot(epoch, 1, "c", brokers, topics)


def led_by(broker_id: int, snap: MetadataSnapshot, incarnation: int = 0) -> dict[ReplicaKey, tuple]:
    """The leaders on broker_id, each with its handle's identity (as ControllerChannel.leader_identity)."""
    return {ReplicaKey(name, p, broker_id): (name, p, broker_id, incarnation) for name, t in snap.topics.items()
            for p, s in t.partitions.items() if s.leader == broker_id}


def handles_of(keys, identities: dict) -> dict:
    """What the channel sends for ``keys``: the handle (here its identity) of each."""
    return {(k.topic, k.partition): identities[k] for k in keys}


def test_the_first_round_is_whole_and_the_next_only_what_changed():
    rounds = MetadataRounds()
    first = rounds.number(snapshot({"a": topic("a", [1, 2]), "b": topic("b", [2])}))
    plan = rounds.plan(1, first, led_by(1, first))
    assert isinstance(plan.update, MetadataSnapshot) and plan.update.version == 1
    assert plan.leaders == [ReplicaKey("a", 0, 1)]
    rounds.delivered(1, plan.image)

    second = rounds.number(snapshot({"a": topic("a", [1, 2]), "b": topic("b", [1], epoch=1), "c": topic("c", [2])}))
    plan = rounds.plan(1, second, led_by(1, second))
    assert isinstance(plan.update, MetadataDelta)
    assert (plan.update.base_version, plan.update.version) == (1, 2)
    assert set(plan.update.topics) == {"b", "c"}, "a did not change"
    assert plan.leaders == [ReplicaKey("b", 0, 1)], "only the changed topics' leaders travel"
    rounds.delivered(1, plan.image)

    third = rounds.number(snapshot({"b": topic("b", [1], epoch=1), "c": topic("c", [2])}))
    plan = rounds.plan(1, third, led_by(1, third))
    assert isinstance(plan.update, MetadataDelta)
    assert dict(plan.update.topics) == {} and tuple(plan.update.removed_topics) == ("a",)


def test_a_leader_handed_over_alone_changes_the_topic():
    """CreateTopics past half its timeout: a round without the starting
    leaders' handles, then the same snapshot with them."""
    rounds = MetadataRounds()
    snap = rounds.number(snapshot({"t": topic("t", [1, 1])}))
    plan = rounds.plan(1, snap, {})
    rounds.delivered(1, plan.image)
    again = rounds.number(snapshot({"t": topic("t", [1, 1])}))
    plan = rounds.plan(1, again, led_by(1, again))
    assert isinstance(plan.update, MetadataDelta) and set(plan.update.topics) == {"t"}
    assert plan.leaders == [ReplicaKey("t", 0, 1), ReplicaKey("t", 1, 1)]
    rounds.delivered(1, plan.image)
    # The same snapshot and leaders, but a re-created leader actor (a new handle): t goes again.
    plan = rounds.plan(1, rounds.number(again), led_by(1, again, incarnation=1))
    assert isinstance(plan.update, MetadataDelta) and set(plan.update.topics) == {"t"}
    rounds.delivered(1, plan.image)
    plan = rounds.plan(1, rounds.number(again), led_by(1, again, incarnation=1))
    assert isinstance(plan.update, MetadataDelta) and not plan.update.topics and not plan.leaders


def test_whole_snapshots_when_the_image_is_unknown_or_the_brokers_or_epoch_changed():
    rounds = MetadataRounds()
    snap = rounds.number(snapshot({"t": topic("t", [1])}))
    rounds.delivered(1, rounds.plan(1, snap, {}).image)
    assert isinstance(rounds.plan(2, rounds.number(snap), {}).update, MetadataSnapshot), "never told"
    fewer = rounds.number(snapshot({"t": topic("t", [1])}, brokers=BROKERS[:1]))
    assert isinstance(rounds.plan(1, fewer, {}).update, MetadataSnapshot), "brokers changed"
    later_epoch = rounds.number(snapshot({"t": topic("t", [1])}, epoch=2))
    assert isinstance(rounds.plan(1, later_epoch, {}).update, MetadataSnapshot), "a new controller epoch"
    rounds.forget(1)
    assert isinstance(rounds.plan(1, rounds.number(snap), {}).update, MetadataSnapshot), "forgotten"
    assert isinstance(rounds.full(1, rounds.number(snap), {}).update, MetadataSnapshot)


def test_an_older_acknowledgement_does_not_replace_a_newer_one():
    rounds = MetadataRounds()
    older = rounds.plan(1, rounds.number(snapshot({"t": topic("t", [1])})), {})
    newer = rounds.plan(1, rounds.number(snapshot({"t": topic("t", [2])})), {})
    rounds.delivered(1, newer.image)
    rounds.delivered(1, older.image)
    plan = rounds.plan(1, rounds.number(snapshot({"t": topic("t", [2])})), {})
    assert isinstance(plan.update, MetadataDelta) and plan.update.base_version == newer.image.version


def test_the_edge_applies_a_delta_only_onto_its_base():
    whole = snapshot({"a": topic("a", [1]), "b": topic("b", [1])})._replace(version=4)
    held = resolve_update(None, whole, {("a", 0): "ha", ("b", 0): "hb"})
    assert isinstance(held, HeldMetadata)

    delta = MetadataDelta(1, 1, 4, 5, {"b": topic("b", [2], epoch=1), "c": topic("c", [1])}, ("a",))
    after = resolve_update(held, delta, {("c", 0): "hc"})
    assert isinstance(after, HeldMetadata) and after.snapshot.version == 5
    assert set(after.snapshot.topics) == {"b", "c"}
    assert after.snapshot.topics["b"].partitions[0].leader == 2
    assert dict(after.leader_handles) == {("c", 0): "hc"}, "b's handle went with its new leader, a's with a"

    assert resolve_update(None, delta, {}) == MetadataApplied(needs_full=True), "nothing held"
    assert resolve_update(after, delta, {}) == MetadataApplied(needs_full=True), "not its base"
    assert resolve_update(held, delta._replace(controller_epoch=2), {}) == MetadataApplied(needs_full=True)
    assert resolve_update(held._replace(snapshot=held.snapshot._replace(controller_epoch=3)), delta, {}) == \
        MetadataApplied(ErrorCode.stale_controller_epoch)
    # A whole snapshot of an older round of the same epoch was overtaken: not applied.
    assert resolve_update(after, whole, {}) == MetadataApplied()
    # Unnumbered or newer whole snapshots always apply.
    assert isinstance(resolve_update(after, whole._replace(version=0), {}), HeldMetadata)
    assert isinstance(resolve_update(after, whole._replace(version=9), {}), HeldMetadata)


def test_the_cache_keeps_unchanged_topics_and_rebuilds_all_when_brokers_change():
    cache = MetadataCache()
    held = resolve_update(None, snapshot({"a": topic("a", [1]), "b": topic("b", [1])})._replace(version=1), {})
    cache.update(held.snapshot)
    a_info = cache.topics["a"]
    held = resolve_update(held, MetadataDelta(1, 1, 1, 2, {"b": topic("b", [2], epoch=1)}, ()), {})
    cache.update(held.snapshot)
    assert cache.topics["a"] is a_info
    assert cache.topics["b"].partitions[0].leader == 2
    cache.update(held.snapshot._replace(brokers=BROKERS[:1], version=3))
    assert cache.topics["a"] is not a_info
    assert cache.topics["a"].partitions[0].offline == (2,), "offline replicas follow the brokers"


def test_rounds_lost_refused_or_reordered_always_converge_to_the_controllers_image():
    """Random rounds over 3 edges: some calls fail before the edge applies
    them, some after (the controller cannot tell), some edges restart
    (nothing held). After each round the controller delivers as the real one
    does (a refused delta gets the whole image at once); whenever the last
    delivery succeeded, the edge serves exactly the controller's image."""
    rng = random.Random(32)
    rounds = MetadataRounds()
    held: dict[int, HeldMetadata | None] = {1: None, 2: None, 3: None}
    names = [f"t{i}" for i in range(8)]
    epoch = 1
    incarnations: dict[ReplicaKey, int] = {}
    for _ in range(400):
        if rng.random() < 0.02:
            epoch += 1  # a controller failover: same rounds object is fine, the epoch decides
        topics = {name: topic(name, [rng.choice([1, 2, 3]) for _ in range(2)], epoch=rng.randrange(3))
                  for name in names if rng.random() < 0.8}
        snap = rounds.number(snapshot(topics, epoch=epoch))

        def leaders(broker: int) -> dict:
            keys = led_by(broker, snap)
            for key in keys:
                if rng.random() < 0.02:
                    incarnations[key] = incarnations.get(key, 0) + 1  # the leader actor was re-created
            return {key: (key, incarnations.get(key, 0)) for key in keys}

        for broker in held:
            if rng.random() < 0.03:
                held[broker] = None  # the edge restarted
            identities = leaders(broker)
            plan = rounds.plan(broker, snap, identities)
            for attempt in range(2):
                fate = rng.random()
                if fate < 0.05:
                    rounds.forget(broker)  # lost on the way
                    break
                answer = resolve_update(held[broker], plan.update, handles_of(plan.leaders, identities))
                if isinstance(answer, HeldMetadata):
                    held[broker] = answer
                    answer = MetadataApplied()
                if fate < 0.10:
                    rounds.forget(broker)  # applied, but the answer was lost
                    break
                if answer.needs_full:
                    assert attempt == 0, "a whole snapshot is never refused"
                    rounds.forget(broker)
                    plan = rounds.full(broker, snap, identities)
                    continue
                assert answer.error == ErrorCode.none
                rounds.delivered(broker, plan.image)
                assert held[broker].snapshot.topics == snap.topics
                assert held[broker].snapshot.version == snap.version
                assert dict(held[broker].leader_handles) == handles_of(identities, identities)
                break
