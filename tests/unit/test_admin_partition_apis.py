"""CreatePartitions (37), ElectLeaders (43), AlterPartitionReassignments (45)
and ListPartitionReassignments (46) at the edge, without Ray: requests are
encoded with kio, dispatched by a real EdgeService, and answered by a fake
controller that records what the edge asked; responses are decoded with kio.
The controller's own decisions are tested with the controller; here it is the
edge's translation: what is forwarded, what is refused before forwarding, and
how answers and failed calls reach the client."""
import asyncio
import datetime

import pytest
from kio.schema.errors import ErrorCode

from core.config import BrokerConfig
from core.controller_messages import (AlterReassignmentsResult, CreatePartitionsSpec, ElectLeadersResult,
                                      ListReassignmentsResult, OngoingReassignment, PartitionOutcome, TopicOutcome)
from net.codec import decode_response, encode_request, request_schema
from net.actor_calls import ActorCallFailed
from actors.edge_ports import RayActorCalls
from net.edge_service import EdgeService
from net.schema_build import nested
from net.server import CloseConnection

CREATE_PARTITIONS, ELECT_LEADERS, ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 37, 43, 45, 46


class FakeController:
    """Stands in for `edge.controller_call`: records (method, args, timeout_s)
    and answers with the canned result, or raises it when it is an exception."""

    def __init__(self, answer):
        self.answer = answer
        self.calls: list[tuple[str, tuple, float]] = []

    async def __call__(self, method, *args, timeout_s=None):
        self.calls.append((method, args, timeout_s))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.fixture
def edge():
    service = EdgeService(BrokerConfig.from_sources(), 1, "127.0.0.1", 0,
                       calls=RayActorCalls.for_config(BrokerConfig.from_sources()))
    yield service
    service.close()


def exchange(edge, answer, api_key, version, **fields):
    """-> (decoded response, controller calls). The request goes through the
    same bytes the edge would read off a socket."""
    controller = FakeController(answer)
    edge.controller_call = controller
    schema = request_schema(api_key, version)
    frame = encode_request(build_nested(schema, fields), correlation_id=7)[4:]
    encoded = asyncio.run(edge.dispatch(None, api_key, version, 7, frame))
    correlation_id, response = decode_response(api_key, version, encoded[4:])
    assert correlation_id == 7
    return response, controller.calls


def build_nested(schema, fields):
    """Turn ("ClassName", {fields}) tuples into kio entities of this version."""
    def convert(value):
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str) and isinstance(value[1], dict):
            cls = nested(schema, value[0])
            return cls(**{k: convert(v) for k, v in value[1].items()})
        if isinstance(value, tuple):
            return tuple(convert(v) for v in value)
        return value
    return schema(**{k: convert(v) for k, v in fields.items()})


def ms(value):
    return datetime.timedelta(milliseconds=value)


def codes(entries, name_field, items_field, index_field):
    return {getattr(t, name_field): {getattr(p, index_field): (p.error_code, p.error_message)
                                     for p in getattr(t, items_field)} for t in entries}


# ---- CreatePartitions ------------------------------------------------------------------------

def partitions_topic(name, count, assignments=None):
    return ("CreatePartitionsTopic", {
        "name": name, "count": count,
        "assignments": None if assignments is None else tuple(
            ("CreatePartitionsAssignment", {"broker_ids": tuple(b)}) for b in assignments)})


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_create_partitions_forwards_specs_every_version(edge, version):
    answer = [TopicOutcome("a"),
              TopicOutcome("b", ErrorCode.invalid_partitions,
                           "Topic currently has 3 partitions, which is higher than the requested 2.")]
    response, calls = exchange(edge, answer, CREATE_PARTITIONS, version, timeout=ms(1500), validate_only=True,
                               topics=(partitions_topic("a", 4, [[1, 2], [2, 3]]), partitions_topic("b", 2)))
    assert calls == [("create_partitions",
                      ([CreatePartitionsSpec("a", 4, [[1, 2], [2, 3]]), CreatePartitionsSpec("b", 2, None)],
                       True),
                      pytest.approx(1.5 + edge.call_timeout_s))]
    assert [(r.name, r.error_code, r.error_message) for r in response.results] == [
        ("a", ErrorCode.none, None),
        ("b", ErrorCode.invalid_partitions, "Topic currently has 3 partitions, which is higher than the requested 2.")]


def test_create_partitions_duplicate_topic_is_invalid_request(edge):
    answer = [TopicOutcome("b")]
    response, calls = exchange(edge, answer, CREATE_PARTITIONS, 3, timeout=ms(0), validate_only=False,
                               topics=(partitions_topic("a", 4), partitions_topic("b", 5), partitions_topic("a", 6)))
    # Neither entry for "a" reaches the controller; "a" is answered once.
    assert calls == [("create_partitions", ([CreatePartitionsSpec("b", 5, None)], False),
                      pytest.approx(edge.call_timeout_s))]
    assert [(r.name, r.error_code) for r in response.results] == [
        ("b", ErrorCode.none), ("a", ErrorCode.invalid_request)]
    assert response.results[1].error_message == "Duplicate topic in request."

    response, calls = exchange(edge, answer, CREATE_PARTITIONS, 1, timeout=ms(0), validate_only=False,
                               topics=(partitions_topic("a", 4), partitions_topic("a", 4)))
    assert calls == []
    assert [(r.name, r.error_code) for r in response.results] == [("a", ErrorCode.invalid_request)]


@pytest.mark.parametrize("error", [ErrorCode.not_controller, ErrorCode.request_timed_out])
def test_create_partitions_controller_unreachable(edge, error):
    response, _ = exchange(edge, ActorCallFailed(error, "controller call failed"), CREATE_PARTITIONS, 2,
                           timeout=ms(100), validate_only=False,
                           topics=(partitions_topic("a", 4), partitions_topic("b", 2)))
    assert [(r.name, r.error_code, r.error_message) for r in response.results] == [
        ("a", error, "controller call failed"), ("b", error, "controller call failed")]


# ---- ElectLeaders ----------------------------------------------------------------------------

def elect_request(version, election_type, topic_partitions, timeout_ms=2000):
    fields = {"timeout": ms(timeout_ms), "topic_partitions": None if topic_partitions is None else tuple(
        ("TopicPartitions", {"topic": t, "partitions": tuple(ps)}) for t, ps in topic_partitions)}
    if version >= 1:
        fields["election_type"] = election_type
    return fields


election_result = PartitionOutcome


@pytest.mark.parametrize("version,election_type", [(0, None), (1, 0), (1, 1), (2, 0), (2, 1)])
def test_elect_leaders_groups_results_per_topic_every_version(edge, version, election_type):
    answer = ElectLeadersResult(ErrorCode.none, [
        election_result("t", 0, ErrorCode.none),
        election_result("u", 3, ErrorCode.election_not_needed, "Leader is already the preferred replica."),
        election_result("t", 1, ErrorCode.preferred_leader_not_available, "no live preferred replica")])
    response, calls = exchange(edge, answer, ELECT_LEADERS, version,
                               **elect_request(version, election_type, [("t", [0, 1, 0]), ("u", [3])]))
    # v0 carries no election type: it is a preferred election. A repeated partition is asked once.
    assert calls == [("elect_leaders", (election_type or 0, [("t", 0), ("t", 1), ("u", 3)], 2000),
                      pytest.approx(2 + edge.call_timeout_s))]
    if version >= 1:
        assert response.error_code == ErrorCode.none
    # Named partitions get every answer, ELECTION_NOT_NEEDED included.
    assert codes(response.replica_election_results, "topic", "partition_result", "partition_id") == {
        "t": {0: (ErrorCode.none, None),
              1: (ErrorCode.preferred_leader_not_available, "no live preferred replica")},
        "u": {3: (ErrorCode.election_not_needed, "Leader is already the preferred replica.")}}
    assert [t.topic for t in response.replica_election_results] == ["t", "u"]


@pytest.mark.parametrize("version", [0, 2])
def test_elect_leaders_all_partitions_hides_election_not_needed(edge, version):
    answer = ElectLeadersResult(ErrorCode.none, [
        election_result("t", 0, ErrorCode.election_not_needed),
        election_result("t", 1, ErrorCode.none),
        election_result("u", 0, ErrorCode.election_not_needed),
        election_result("v", 2, ErrorCode.eligible_leaders_not_available, "no eligible leader")])
    response, calls = exchange(edge, answer, ELECT_LEADERS, version, **elect_request(version, 0, None))
    assert calls == [("elect_leaders", (0, None, 2000), pytest.approx(2 + edge.call_timeout_s))]
    assert codes(response.replica_election_results, "topic", "partition_result", "partition_id") == {
        "t": {1: (ErrorCode.none, None)},
        "v": {2: (ErrorCode.eligible_leaders_not_available, "no eligible leader")}}


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("election_type", [2, -1])
def test_elect_leaders_unknown_election_type_is_invalid_request(edge, version, election_type):
    response, calls = exchange(edge, ElectLeadersResult(), ELECT_LEADERS, version,
                               **elect_request(version, election_type, [("t", [0, 1])]))
    assert calls == []
    assert response.error_code == ErrorCode.invalid_request
    message = f"Unknown election type {election_type}"
    assert codes(response.replica_election_results, "topic", "partition_result", "partition_id") == {
        "t": {0: (ErrorCode.invalid_request, message), 1: (ErrorCode.invalid_request, message)}}


@pytest.mark.parametrize("version", [0, 1, 2])
@pytest.mark.parametrize("error", [ErrorCode.not_controller, ErrorCode.request_timed_out])
def test_elect_leaders_controller_unreachable(edge, version, error):
    response, _ = exchange(edge, ActorCallFailed(error, "controller call failed"), ELECT_LEADERS, version,
                           **elect_request(version, 0, [("t", [0]), ("u", [1])]))
    if version >= 1:
        assert response.error_code == error
    # v0 has no top-level code: the per-partition codes carry the failure.
    assert codes(response.replica_election_results, "topic", "partition_result", "partition_id") == {
        "t": {0: (error, "controller call failed")}, "u": {1: (error, "controller call failed")}}

    response, _ = exchange(edge, ActorCallFailed(error, "controller call failed"), ELECT_LEADERS, version,
                           **elect_request(version, 0, None))
    assert response.replica_election_results == ()
    if version >= 1:
        assert response.error_code == error


# ---- AlterPartitionReassignments -------------------------------------------------------------

def reassign_request(topics, timeout_ms=30000):
    return {"timeout": ms(timeout_ms), "topics": tuple(
        ("ReassignableTopic", {"name": name, "partitions": tuple(
            ("ReassignablePartition", {"partition_index": p,
                                       "replicas": None if replicas is None else tuple(replicas)})
            for p, replicas in partitions)}) for name, partitions in topics)}


def test_alter_reassignments_forwards_moves_and_cancels(edge):
    answer = AlterReassignmentsResult(ErrorCode.none, None, [
        # Answered out of request order on purpose: the response follows the request.
        PartitionOutcome("u", 0, ErrorCode.no_reassignment_in_progress, "No reassignment in progress for u-0"),
        PartitionOutcome("t", 1),
        PartitionOutcome("t", 0, ErrorCode.invalid_replica_assignment, "broker 9 does not exist")])
    response, calls = exchange(edge, answer, ALTER_REASSIGNMENTS, 0,
                               **reassign_request([("t", [(0, [9, 1]), (1, [2, 3, 1])]), ("u", [(0, None)])]))
    assert calls == [("alter_partition_reassignments",
                      ([("t", 0, [9, 1]), ("t", 1, [2, 3, 1]), ("u", 0, None)], 30000),
                      pytest.approx(30 + edge.call_timeout_s))]
    assert (response.error_code, response.error_message) == (ErrorCode.none, None)
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in response.responses] == [
        ("t", [0, 1]), ("u", [0])]
    assert codes(response.responses, "name", "partitions", "partition_index") == {
        "t": {0: (ErrorCode.invalid_replica_assignment, "broker 9 does not exist"), 1: (ErrorCode.none, None)},
        "u": {0: (ErrorCode.no_reassignment_in_progress, "No reassignment in progress for u-0")}}


def test_alter_reassignments_duplicate_partition_is_invalid_request(edge):
    answer = AlterReassignmentsResult(ErrorCode.none, None, [PartitionOutcome("t", 1)])
    # t-0 twice, once under a repeated topic entry: neither move is forwarded.
    response, calls = exchange(edge, answer, ALTER_REASSIGNMENTS, 0, **reassign_request(
        [("t", [(0, [1, 2]), (1, [2, 3])]), ("t", [(0, None)])]))
    assert calls == [("alter_partition_reassignments", ([("t", 1, [2, 3])], 30000),
                      pytest.approx(30 + edge.call_timeout_s))]
    assert response.error_code == ErrorCode.none
    assert codes(response.responses, "name", "partitions", "partition_index") == {
        "t": {0: (ErrorCode.invalid_request, "Duplicate partition t-0 in request."), 1: (ErrorCode.none, None)}}
    assert [len(t.partitions) for t in response.responses] == [2]

    response, calls = exchange(edge, answer, ALTER_REASSIGNMENTS, 0,
                               **reassign_request([("t", [(0, [1]), (0, [2])])]))
    assert calls == []
    assert codes(response.responses, "name", "partitions", "partition_index") == {
        "t": {0: (ErrorCode.invalid_request, "Duplicate partition t-0 in request.")}}


@pytest.mark.parametrize("error", [ErrorCode.not_controller, ErrorCode.request_timed_out])
def test_alter_reassignments_controller_unreachable(edge, error):
    response, _ = exchange(edge, ActorCallFailed(error, "controller call failed"), ALTER_REASSIGNMENTS, 0,
                           **reassign_request([("t", [(0, [1, 2])]), ("u", [(3, None)])]))
    assert (response.error_code, response.error_message) == (error, "controller call failed")
    assert codes(response.responses, "name", "partitions", "partition_index") == {
        "t": {0: (error, "controller call failed")}, "u": {3: (error, "controller call failed")}}


def test_alter_reassignments_top_level_controller_error_reaches_every_partition(edge):
    answer = AlterReassignmentsResult(ErrorCode.not_controller, "not the active controller")
    response, _ = exchange(edge, answer, ALTER_REASSIGNMENTS, 0, **reassign_request([("t", [(0, [1]), (1, [1])])]))
    assert (response.error_code, response.error_message) == (ErrorCode.not_controller, "not the active controller")
    assert codes(response.responses, "name", "partitions", "partition_index") == {
        "t": {0: (ErrorCode.not_controller, "not the active controller"),
              1: (ErrorCode.not_controller, "not the active controller")}}


def test_alter_reassignments_newer_versions_are_not_served(edge):
    # v1 (allow_replication_factor_change) is not advertised; the Java client uses v0 unless told
    # to forbid replication-factor changes.
    frame = encode_request(build_nested(request_schema(ALTER_REASSIGNMENTS, 1),
                                        reassign_request([("t", [(0, [1])])])), correlation_id=1)[4:]
    with pytest.raises(CloseConnection):
        asyncio.run(edge.dispatch(None, ALTER_REASSIGNMENTS, 1, 1, frame))


# ---- ListPartitionReassignments --------------------------------------------------------------

ongoing = OngoingReassignment


def list_request(topics, timeout_ms=5000):
    return {"timeout": ms(timeout_ms), "topics": None if topics is None else tuple(
        ("ListPartitionReassignmentsTopics", {"name": name, "partition_indexes": tuple(ps)})
        for name, ps in topics)}


def test_list_reassignments_groups_ongoing_moves_per_topic(edge):
    answer = ListReassignmentsResult(ErrorCode.none, None, [
        ongoing("t", 0, [1, 2, 3], [3], [1]), ongoing("u", 2, [4, 5], [5], []), ongoing("t", 2, [2, 1], [1], [])])
    response, calls = exchange(edge, answer, LIST_REASSIGNMENTS, 0, **list_request(None))
    assert calls == [("list_partition_reassignments", (None, 5000), pytest.approx(5 + edge.call_timeout_s))]
    assert (response.error_code, response.error_message) == (ErrorCode.none, None)
    assert {t.name: [(p.partition_index, p.replicas, p.adding_replicas, p.removing_replicas) for p in t.partitions]
            for t in response.topics} == {
        "t": [(0, (1, 2, 3), (3,), (1,)), (2, (2, 1), (1,), ())],
        "u": [(2, (4, 5), (5,), ())]}

    response, calls = exchange(edge, ListReassignmentsResult(),
                               LIST_REASSIGNMENTS, 0, **list_request([("t", [0, 1]), ("gone", [0])]))
    assert calls[0][1] == ([("t", 0), ("t", 1), ("gone", 0)], 5000)
    assert response.topics == ()


@pytest.mark.parametrize("error", [ErrorCode.not_controller, ErrorCode.request_timed_out])
def test_list_reassignments_controller_unreachable(edge, error):
    response, _ = exchange(edge, ActorCallFailed(error, "controller call failed"), LIST_REASSIGNMENTS, 0,
                           **list_request([("t", [0, 1])]))
    assert (response.error_code, response.error_message) == (error, "controller call failed")
    # As Kafka does, the partitions asked about are echoed with no replicas.
    assert [(t.name, [(p.partition_index, p.replicas) for p in t.partitions]) for t in response.topics] == [
        ("t", [(0, ()), (1, ())])]

    response, _ = exchange(edge, ActorCallFailed(error, "controller call failed"), LIST_REASSIGNMENTS, 0,
                           **list_request(None))
    assert response.error_code == error and response.topics == ()
