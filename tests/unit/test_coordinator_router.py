"""The coordinator router's one mapping of failed coordinator calls to Kafka
error codes (net/coordinator_router.py), as group and transaction calls see
it: a gone coordinator is NOT_COORDINATOR and is looked up again, a bug in
it UNKNOWN_SERVER_ERROR, a timeout what Kafka answers for that request; an
error of the edge's own is raised."""
import asyncio

import pytest
from kio.schema.errors import ErrorCode

from core.config import BrokerConfig
from core.controller_messages import BrokerEndpoint, MetadataSnapshot, PartitionSnapshot, TopicSnapshot
from core.local_calls import LocalCallFailed, LocalCallLost
from core.naming import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from net.coordinator_router import GROUP_TIMEOUT_DEFAULT, GROUP_TIMEOUT_ERRORS, coordinator_failure
from actors.edge_ports import RayActorCalls
from net.edge_service import EdgeService
from net.txn_coordinators import TransactionRouting

E = ErrorCode
RayActorError = type("RayActorError", (Exception,), {"__module__": "ray.exceptions"})
RayTaskError = type("RayTaskError(ValueError)", (Exception,), {"__module__": "ray.exceptions"})


@pytest.mark.parametrize("exc, timed_out, expected", [
    (asyncio.TimeoutError(), E.request_timed_out, E.request_timed_out),
    (asyncio.TimeoutError(), E.rebalance_in_progress, E.rebalance_in_progress),
    (LocalCallLost("closed"), E.request_timed_out, E.not_coordinator),
    (RayActorError("gone"), E.request_timed_out, E.not_coordinator),
    (LocalCallFailed("KeyError: x"), E.request_timed_out, E.unknown_server_error),
    (RayTaskError("ValueError: x"), E.request_timed_out, E.unknown_server_error),
    (ValueError("ours"), E.request_timed_out, None),
])
def test_failure_mapping(exc, timed_out, expected):
    assert coordinator_failure(exc, "group", "heartbeat", timed_out) == expected


def test_a_timed_out_group_request_answers_what_kafka_answers_for_it():
    assert GROUP_TIMEOUT_ERRORS["join_group"] == GROUP_TIMEOUT_ERRORS["sync_group"] == E.rebalance_in_progress
    assert GROUP_TIMEOUT_ERRORS["commit_offsets"] == GROUP_TIMEOUT_ERRORS["txn_commit_offsets"] == E.request_timed_out
    for method in ("heartbeat", "leave_group", "fetch_offsets", "describe_groups", "delete_groups", "delete_offsets"):
        assert GROUP_TIMEOUT_ERRORS.get(method, GROUP_TIMEOUT_DEFAULT) == E.coordinator_not_available


class _Coordinator:
    """Stands in for a coordinator actor handle: each method answers or raises ``outcome``."""

    def __init__(self, outcome):
        self.outcome = outcome
        self.calls = []

    def __getattr__(self, method):
        coordinator = self

        class _Method:
            @staticmethod
            def remote(*args):
                coordinator.calls.append((method, args))

                async def answer():
                    if isinstance(coordinator.outcome, BaseException):
                        raise coordinator.outcome
                    if coordinator.outcome == "slow":
                        await asyncio.sleep(10)
                    return coordinator.outcome
                return answer()
        return _Method


def _edge() -> EdgeService:
    edge = EdgeService(BrokerConfig.from_sources(), 1, "127.0.0.1", 0,
                       calls=RayActorCalls.for_config(BrokerConfig.from_sources()))
    edge.metadata.update(MetadataSnapshot(1, 1, "c1", [BrokerEndpoint(1, "127.0.0.1", 1)], {
        name: TopicSnapshot(f"00000000-0000-0000-0000-00000000000{i}", {0: PartitionSnapshot(1, 0, [1], [1])})
        for i, name in enumerate((OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC), start=1)}))
    return edge


@pytest.mark.parametrize("outcome, method, expected, forgotten", [
    ("answer", "heartbeat", None, False),
    (RayActorError("gone"), "heartbeat", E.not_coordinator, True),
    (LocalCallLost("closed"), "commit_offsets", E.not_coordinator, True),
    (RayTaskError("boom"), "heartbeat", E.unknown_server_error, False),
    ("slow", "heartbeat", E.coordinator_not_available, False),
    ("slow", "join_group", E.rebalance_in_progress, False),
    ("slow", "commit_offsets", E.request_timed_out, False),
])
def test_group_call_maps_failures_once(outcome, method, expected, forgotten):
    async def go():
        edge = _edge()
        coordinator = _Coordinator(outcome)
        edge.coordinators.handles[0] = coordinator
        try:
            return await edge.group_call("g", method, "g", timeout_s=0.05), 0 in edge.coordinators.handles
        finally:
            edge.close()

    (error, answer), kept = asyncio.run(go())
    assert error == expected
    assert answer == ("answer" if expected is None else None)
    assert kept is not forgotten


def test_group_call_raises_an_error_of_its_own():
    async def go():
        edge = _edge()
        edge.coordinators.handles[0] = _Coordinator(ValueError("a bug in the edge"))
        try:
            await edge.group_call("g", "heartbeat", "g")
        finally:
            edge.close()

    with pytest.raises(ValueError):
        asyncio.run(go())


def test_group_call_of_a_group_not_coordinated_here_is_not_coordinator():
    async def go():
        edge = _edge()
        edge.coordinators.handles[0] = _Coordinator("answer")  # left from when this broker led it
        edge.metadata.update(MetadataSnapshot(
            1, 1, "c1", [BrokerEndpoint(1, "127.0.0.1", 1), BrokerEndpoint(2, "127.0.0.1", 2)],
            {OFFSETS_TOPIC: TopicSnapshot("00000000-0000-0000-0000-000000000001",
                                          {0: PartitionSnapshot(2, 1, isr=[2, 1], replicas=[2, 1])})}))
        try:
            return await edge.group_call("g", "heartbeat", "g")
        finally:
            edge.close()

    assert asyncio.run(go()) == (E.not_coordinator, None)


@pytest.mark.parametrize("outcome, expected, forgotten", [
    ("answer", None, False),
    (RayActorError("gone"), E.not_coordinator, True),
    (RayTaskError("boom"), E.unknown_server_error, False),
    ("slow", E.request_timed_out, False),
])
def test_transaction_calls_share_the_mapping(outcome, expected, forgotten):
    async def go():
        edge = _edge()
        routing = TransactionRouting(edge)
        routing._handles[0] = _Coordinator(outcome)
        try:
            return await routing.call("tx", "end_txn", "tx", timeout_s=0.05), 0 in routing._handles
        finally:
            edge.close()

    (error, answer), kept = asyncio.run(go())
    assert error == expected and answer == ("answer" if expected is None else None)
    assert kept is not forgotten


def test_the_edge_finds_coordinators_by_the_names_they_register_under():
    """core.naming holds the names net/ uses; the coordinator actors must register under the same."""
    from actors import group_coordinator, transaction_coordinator
    from core import naming

    assert naming.group_coordinator_actor_name(3, 2) == group_coordinator.coordinator_actor_name(3, 2)
    assert naming.transaction_coordinator_actor_name(3, 2) == transaction_coordinator.coordinator_actor_name(3, 2)
    assert naming.OFFSETS_TOPIC == group_coordinator.OFFSETS_TOPIC == transaction_coordinator.OFFSETS_TOPIC


class _ImageHoldingCoordinator:
    """Stands in for a group coordinator as to the topics image: it keeps the
    newest whole image it was sent and asks for the whole image when sent a
    reference to a newer version (the rule of ConsumerGroupCoordinator.wants_image)."""

    def __init__(self):
        from cluster.groups.consumer import ConsumerGroupCoordinator

        self.consumer_groups = ConsumerGroupCoordinator(classic=None, timer=None, append_records=None)
        self.images = []

    def __getattr__(self, method):
        coordinator = self

        class _Method:
            @staticmethod
            def remote(*args):
                from cluster.groups.consumer import TopicsImageWanted

                image = args[-1]
                coordinator.images.append(image)

                async def answer():
                    if coordinator.consumer_groups.wants_image(image):
                        return TopicsImageWanted(coordinator.consumer_groups.image.version)
                    coordinator.consumer_groups.see_image(image)
                    return "answer"
                return answer()
        return _Method


def test_the_topics_image_goes_whole_only_to_a_coordinator_without_it():
    import uuid

    from cluster.groups.consumer import TopicsImage

    async def go():
        edge = _edge()
        coordinator = _ImageHoldingCoordinator()
        edge.coordinators.handles[0] = coordinator
        call = edge.coordinators.group_call_with_topics
        try:
            for _ in range(3):
                assert await call("g", "consumer_group_heartbeat", "request") == (None, "answer")
            first = [image.topics is not None for image in coordinator.images]
            assert first == [True, False, False]  # whole once, then references to the same version
            held = coordinator.consumer_groups.image
            assert held.version == edge.metadata.version and held.topics
            edge.metadata.update(MetadataSnapshot(  # a new topic: a new version goes whole
                1, 1, "c1", [BrokerEndpoint(1, "127.0.0.1", 1)], {
                    OFFSETS_TOPIC: TopicSnapshot("00000000-0000-0000-0000-000000000001",
                                                 {0: PartitionSnapshot(1, 0, [1], [1])}),
                    "t": TopicSnapshot("00000000-0000-0000-0000-000000000009",
                                       {0: PartitionSnapshot(1, 0, [1], [1])})}))
            assert await call("g", "consumer_group_heartbeat", "request") == (None, "answer")
            assert coordinator.images[-1].topics is not None
            assert "t" in {name for name, _, _ in coordinator.consumer_groups.image.topics}
            # A restarted coordinator holds no image: it asks, and gets it whole in the same request.
            restarted = _ImageHoldingCoordinator()
            edge.coordinators.handles[0] = restarted
            assert await call("g", "join_group", "g") == (None, "answer")
            assert [image.topics is not None for image in restarted.images] == [False, True]
            assert restarted.consumer_groups.image.version == edge.metadata.version
            # Another edge (or this one restarted: its versions count from 1 again) is not
            # taken for this one: its reference to a version it never sent whole is refused.
            other = TopicsImage(edge.metadata.version, None, source="another-edge")
            assert restarted.consumer_groups.wants_image(other)
            restarted.consumer_groups.see_image(TopicsImage(1, (("x", uuid.UUID(int=5), 1),), source="another-edge"))
            assert restarted.consumer_groups.image.topics == (("x", uuid.UUID(int=5), 1),)  # the newest arrival
            assert not restarted.consumer_groups.wants_image(TopicsImage(1, None, source="another-edge"))
            restarted.consumer_groups.see_image(TopicsImage(0, (), source="another-edge"))  # older: ignored
            assert restarted.consumer_groups.image.topics == (("x", uuid.UUID(int=5), 1),)
        finally:
            edge.close()

    asyncio.run(go())
