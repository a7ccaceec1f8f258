"""`raykafka topics / reassign / elect-leaders` without a broker: argument
checks, Kafka's output formats, exit-status decisions, reassignment proposals,
and the admin client's version negotiation against an in-process fake broker."""
from __future__ import annotations

import contextlib
import datetime
import io
import random
import socket
import struct
import threading
import uuid

import pytest
from kio.schema.errors import ErrorCode

from cli import elect_leaders, reassign, topics
from cli.admin_client import (BrokerConnection, BrokerInfo, ConfigEntry, OngoingReassignment, Outcome,
                              PartitionInfo, TopicInfo, UnsupportedApi, kafka_topic_id)
from cli.main import build_parser, main
from cluster.topic_admin import TopicSpecError
from net.codec import decode_request, encode_response, peek_header, response_schema
from net.schema_build import build, nested

UNREACHABLE = "127.0.0.1:1"


def parse(*argv):
    return build_parser().parse_args(list(argv))


def run_cli(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse refusing the command line
            code = exc.code
    return code, out.getvalue(), err.getvalue()


# ---- topics: arguments ------------------------------------------------------------------------------------------
def test_topics_parser_uses_kafka_option_names():
    args = parse("topics", "--bootstrap-server", "h:1", "--create", "--topic", "t", "--partitions", "3",
                 "--replication-factor", "2", "--config", "cleanup.policy=compact", "--config", "retention.ms=5")
    assert (args.create, args.topic, args.partitions, args.replication_factor) == (True, "t", 3, 2)
    assert topics.parse_configs(args.config) == {"cleanup.policy": "compact", "retention.ms": "5"}
    assert topics.usage_problem(args) is None


@pytest.mark.parametrize("argv", [
    ["topics", "--list", "--describe"],  # two actions
    ["topics", "--topic", "t"],  # no action
    ["topics", "--create", "--topic", "t", "--partitions", "x"],
])
def test_topics_parser_refuses_with_status_2(argv):
    code, _, err = run_cli(*argv)
    assert code == 2 and "usage:" in err


@pytest.mark.parametrize("argv,problem", [
    (["--create"], "--topic is required"),
    (["--delete"], "--topic is required"),
    (["--list", "--partitions", "3"], "--partitions is only valid"),
    (["--describe", "--replication-factor", "2"], "--replication-factor is only valid"),
    (["--create", "--topic", "t", "--replica-assignment", "0:1", "--partitions", "1"], "cannot be used with"),
    (["--create", "--topic", "t", "--partitions", "0"], "greater than 0"),
    (["--create", "--topic", "t", "--replication-factor", "0"], "between 1 and 32767"),
    (["--alter", "--topic", "t"], "--alter needs"),
    (["--alter", "--topic", "t", "--replica-assignment", "0"], "needs --partitions"),
    (["--list", "--under-replicated-partitions"], "only valid with --describe"),
    (["--describe", "--under-replicated-partitions", "--unavailable-partitions"], "choose one"),
    (["--create", "--topic", "t", "--if-exists"], "--if-exists is only valid"),
    (["--delete", "--topic", "t", "--if-not-exists"], "--if-not-exists is only valid"),
    (["--delete", "--topic", "t", "--exclude-internal"], "--exclude-internal is only valid"),
    (["--describe", "--topic", "a[", "--if-exists"], "not a valid regular expression"),
    (["--list", "--delete-config", "x"], "--delete-config is only valid"),
])
def test_topics_usage_problems_exit_2_before_connecting(argv, problem):
    assert problem in topics.usage_problem(parse("topics", *argv))
    code, out, err = run_cli("topics", "--bootstrap-server", UNREACHABLE, *argv)
    assert code == 2 and problem in err and out == ""


@pytest.mark.parametrize("argv", [
    ["--create", "--topic", "t", "--config", "noequals"],
    ["--create", "--topic", "t", "--replica-assignment", "0:0"],
    ["--create", "--topic", "t", "--replica-assignment", "0:1,2"],
    ["--create", "--topic", "t", "--replica-assignment", "a:b"],
])
def test_topics_malformed_values_exit_2(argv):
    code, _, err = run_cli("topics", "--bootstrap-server", UNREACHABLE, *argv)
    assert code == 2, err


def test_unreachable_broker_exits_1():
    code, _, err = run_cli("topics", "--bootstrap-server", UNREACHABLE, "--list")
    assert code == 1 and "cannot connect to 127.0.0.1:1" in err


def test_replica_assignment_and_configs():
    assert topics.parse_replica_assignment("0:1, 1:2 ,2:0") == {0: [0, 1], 1: [1, 2], 2: [2, 0]}
    assert topics.parse_replica_assignment("3") == {0: [3]}
    with pytest.raises(topics.UsageError, match="duplicate entries: 1"):
        topics.parse_replica_assignment("1:1")
    with pytest.raises(topics.UsageError, match="Partition 1 has different replication factor"):
        topics.parse_replica_assignment("0:1,2")
    assert topics.parse_configs([" retention.ms = 10 "]) == {"retention.ms": "10"}
    with pytest.raises(topics.UsageError, match="key=val"):
        topics.parse_configs(["a=b=c"])


def test_alter_replica_assignment_keeps_only_new_partitions():
    assignment = topics.parse_replica_assignment("0:1,1:2,2:0,0:2")
    assert topics.new_partition_assignment(assignment, 2) == [[2, 0], [0, 2]]
    assert topics.new_partition_assignment(assignment, 4) == []


def test_topic_regex_selects_whole_names_and_internal_topics():
    found = {n: TopicInfo(n, {}, internal=n.startswith("__")) for n in ["orders", "orders-dlq", "__consumer_offsets"]}
    assert topics.select_topics(found, None, False) == ["__consumer_offsets", "orders", "orders-dlq"]
    assert topics.select_topics(found, None, True) == ["orders", "orders-dlq"]
    assert topics.select_topics(found, "orders", False) == ["orders"]
    assert topics.select_topics(found, "orders.*", False) == ["orders", "orders-dlq"]
    assert topics.select_topics(found, "order", False) == []


# ---- topics: describe output ------------------------------------------------------------------------------------
def configs(**overrides) -> list[ConfigEntry]:
    entries = [ConfigEntry("cleanup.policy", "delete", 5), ConfigEntry("min.insync.replicas", "1", 5),
               ConfigEntry("segment.bytes", "8388608", 4)]
    for key, value in overrides.items():
        entries = [e for e in entries if e.name != key.replace("_", ".")]
        entries.append(ConfigEntry(key.replace("_", "."), value, 1))
    return entries


def three_partitions() -> TopicInfo:
    return TopicInfo("orders", {
        0: PartitionInfo(0, 1, (1, 2, 3), (1, 2, 3)),
        1: PartitionInfo(1, 2, (2, 3, 1), (2, 3)),  # under-replicated, at min ISR 2
        2: PartitionInfo(2, -1, (3, 1, 2), (3,), offline=(3,)),  # no leader
    }, topic_id=kafka_topic_id(uuid.UUID(int=1)))


def test_describe_prints_kafkas_tab_separated_lines():
    lines = topics.describe_lines([three_partitions()], {"orders": configs(min_insync_replicas="2")}, {},
                                  {1, 2, 3}, None, False)
    assert lines == [
        "Topic: orders\tTopicId: AAAAAAAAAAAAAAAAAAAAAQ\tPartitionCount: 3\tReplicationFactor: 3\t"
        "Configs: min.insync.replicas=2,segment.bytes=8388608",
        "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3",
        "\tTopic: orders\tPartition: 1\tLeader: 2\tReplicas: 2,3,1\tIsr: 2,3",
        "\tTopic: orders\tPartition: 2\tLeader: none\tReplicas: 3,1,2\tIsr: 3\tOffline: 3",
    ]


@pytest.mark.parametrize("filter_name,partitions", [
    ("under_replicated_partitions", [1, 2]),
    ("unavailable_partitions", [2]),
    ("under_min_isr_partitions", [2]),
    ("at_min_isr_partitions", [1]),
])
def test_describe_report_options_print_matching_partitions_only(filter_name, partitions):
    lines = topics.describe_lines([three_partitions()], {"orders": configs(min_insync_replicas="2")}, {},
                                  {1, 2, 3}, filter_name, False)
    assert [int(line.split("Partition: ")[1].split("\t")[0]) for line in lines] == partitions
    assert all(line.startswith("\tTopic: ") for line in lines)


def test_unavailable_includes_a_leader_on_a_dead_broker():
    topic = TopicInfo("t", {0: PartitionInfo(0, 7, (7,), (7,))})
    assert topics.describe_lines([topic], {}, {}, {1}, "unavailable_partitions", False) == [
        "\tTopic: t\tPartition: 0\tLeader: 7\tReplicas: 7\tIsr: 7"]
    assert topics.describe_lines([topic], {}, {}, {7}, "unavailable_partitions", False) == []


def test_reassignment_in_flight_is_shown_and_not_under_replicated():
    topic = TopicInfo("t", {0: PartitionInfo(0, 1, (1, 2, 3, 4), (1, 2))})
    moving = {("t", 0): OngoingReassignment(replicas=(1, 2, 3, 4), adding=(3, 4), removing=())}
    lines = topics.describe_lines([topic], {}, moving, {1, 2, 3, 4}, None, False)
    assert "ReplicationFactor: 2" in lines[0]
    assert lines[1].endswith("\tAdding Replicas: 3,4\tRemoving Replicas: ")
    assert topics.describe_lines([topic], {}, moving, {1, 2, 3, 4}, "under_replicated_partitions", False) == []


def test_topics_with_overrides_prints_topic_lines_only():
    plain = TopicInfo("plain", {0: PartitionInfo(0, 1, (1,), (1,))})
    tuned = TopicInfo("tuned", {0: PartitionInfo(0, 1, (1,), (1,))})
    entries = {"plain": [ConfigEntry("cleanup.policy", "delete", 5)],
               "tuned": [ConfigEntry("cleanup.policy", "compact", 1)]}
    assert topics.describe_lines([plain, tuned], entries, {}, {1}, None, True) == [
        "Topic: tuned\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: cleanup.policy=compact"]


# ---- reassign ---------------------------------------------------------------------------------------------------
def test_reassign_requires_and_permits_per_action():
    assert reassign.usage_problem(parse("reassign", "--generate", "--broker-list", "1")) == \
        'Missing required argument "[topics-to-move-json-file]"'
    assert reassign.usage_problem(parse("reassign", "--verify", "--reassignment-json-file", "f", "--additional")) \
        == 'Option "--additional" can\'t be used with action "--verify"'
    assert reassign.usage_problem(parse("reassign", "--execute", "--reassignment-json-file", "f",
                                        "--additional")) is None
    code, _, err = run_cli("reassign", "--verify", "--execute", "--reassignment-json-file", "f")
    assert code == 2 and "not allowed with" in err


def test_reassign_unreadable_file_is_a_usage_error(tmp_path):
    code, _, err = run_cli("reassign", "--bootstrap-server", UNREACHABLE, "--verify", "--reassignment-json-file",
                           str(tmp_path / "missing.json"))
    assert code == 2 and "cannot read" in err
    bad = tmp_path / "bad.json"
    bad.write_text('{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[1,1]}]}')
    code, _, err = run_cli("reassign", "--bootstrap-server", UNREACHABLE, "--execute", "--reassignment-json-file",
                           str(bad))
    assert code == 2 and "a-0 contains multiple entries for 1" in err


def test_reassignment_json_round_trips_in_kafkas_format():
    text = reassign.reassignment_json({("b", 0): [3, 1], ("a", 1): [2], ("a", 0): [1]})
    assert text == ('{"version":1,"partitions":['
                    '{"topic":"a","partition":0,"replicas":[1],"log_dirs":["any"]},'
                    '{"topic":"a","partition":1,"replicas":[2],"log_dirs":["any"]},'
                    '{"topic":"b","partition":0,"replicas":[3,1],"log_dirs":["any","any"]}]}')
    assert reassign.parse_reassignment(text) == {("a", 0): [1], ("a", 1): [2], ("b", 0): [3, 1]}


@pytest.mark.parametrize("text,problem", [
    ('{"version":1,"partitions":[]}', "cannot be empty"),
    ('{"version":2,"partitions":[]}', "Not supported version field value 2"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[]}]}', "Partition replica list cannot be empty"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[1]},{"topic":"a","partition":0,"replicas":[2]}]}',
     "duplicate topic partitions: a-0"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[1,2],"log_dirs":["any"]}]}', "Size of replicas list"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[1],"log_dirs":["/data"]}]}', "AlterReplicaLogDirs"),
    ('{"partitions":[{"topic":"a","replicas":[1]}]}', '"topic", "partition" and "replicas"'),
    ("not json", "not valid JSON"),
])
def test_reassignment_file_errors(text, problem):
    with pytest.raises(reassign.UsageError, match=problem.replace("[", r"\[")):
        reassign.parse_reassignment(text)


def test_topics_to_move_and_broker_list():
    assert reassign.parse_topics_to_move('{"topics":[{"topic":"a"},{"topic":"b"}],"version":1}') == ["a", "b"]
    with pytest.raises(reassign.UsageError, match="duplicate entries: a"):
        reassign.parse_topics_to_move('{"topics":[{"topic":"a"},{"topic":"a"}]}')
    assert reassign.parse_broker_list("3,1,2") == [3, 1, 2]
    with pytest.raises(reassign.UsageError, match="duplicate entries: 1"):
        reassign.parse_broker_list("1,1")


def test_proposal_keeps_partition_count_and_factor_and_uses_only_listed_brokers():
    current = {("a", p): [1, 2] for p in range(6)} | {("b", 0): [1, 2, 3]}
    brokers = [BrokerInfo(b, "h", 1) for b in (2, 3, 4)]
    proposal = reassign.propose(current, brokers, rng=random.Random(3))
    assert set(proposal) == set(current)
    for tp, replicas in proposal.items():
        assert len(replicas) == len(current[tp]) and len(set(replicas)) == len(replicas)
        assert set(replicas) <= {2, 3, 4}
    # Leaders spread evenly, as Kafka's assignment does.
    assert sorted(proposal[("a", p)][0] for p in range(6)) == [2, 2, 3, 3, 4, 4]
    assert proposal == reassign.propose(current, brokers, rng=random.Random(3))


def test_rack_aware_proposal_spreads_replicas_over_racks():
    brokers = [BrokerInfo(1, "h", 1, "r1"), BrokerInfo(2, "h", 1, "r1"), BrokerInfo(3, "h", 1, "r2"),
               BrokerInfo(4, "h", 1, "r2")]
    rack = {b.node_id: b.rack for b in brokers}
    proposal = reassign.propose({("t", p): [1, 2] for p in range(4)}, brokers, rng=random.Random(1))
    assert all({rack[r] for r in replicas} == {"r1", "r2"} for replicas in proposal.values())
    with pytest.raises(reassign.UsageError, match="--disable-rack-aware"):
        reassign.propose({("t", 0): [1]}, brokers[:2] + [BrokerInfo(5, "h", 1)])
    assert reassign.propose({("t", 0): [1]}, brokers[:2] + [BrokerInfo(5, "h", 1)], rack_aware=False)


def test_proposal_needs_enough_brokers():
    with pytest.raises(TopicSpecError, match="larger than available brokers: 1"):
        reassign.propose({("t", 0): [1, 2]}, [BrokerInfo(1, "h", 1)])
    with pytest.raises(reassign.UsageError, match="none of the brokers"):
        reassign.propose({("t", 0): [1]}, [])


def test_verify_states_and_exit_status():
    targets = {("t", 0): [2, 3], ("t", 1): [3, 1], ("t", 2): [1, 2]}
    ongoing = {("t", 1): OngoingReassignment((1, 2, 3), (3,), (2,))}
    now = {("t", 0): [2, 3], ("t", 1): [1, 2, 3], ("t", 2): [2, 1]}
    lines, code = reassign.verify_report(reassign.reassignment_states(targets, ongoing, now))
    assert lines == ["Status of partition reassignment:",
                     "Reassignment of partition t-0 is completed.",
                     "Reassignment of partition t-1 is still in progress.",
                     "There is no active reassignment of partition t-2, but replica set is 2,1 rather than 1,2."]
    assert code == reassign.EXIT_FAILED
    del targets[("t", 2)]
    assert reassign.verify_report(reassign.reassignment_states(targets, ongoing, now))[1] == \
        reassign.EXIT_IN_PROGRESS
    assert reassign.verify_report(reassign.reassignment_states(targets, {}, {**now, ("t", 1): [3, 1]}))[1] == \
        reassign.EXIT_OK
    # A partition that is gone never verifies.
    assert reassign.verify_report(reassign.reassignment_states({("x", 0): [1]}, {}, {}))[1] == reassign.EXIT_FAILED


def test_list_and_cancel_choices():
    assert reassign.ongoing_text({}) == "No partition reassignments found."
    ongoing = {("t", 0): OngoingReassignment((1, 2, 3), (3,), (1,)), ("s", 1): OngoingReassignment((4, 5), (5,), ())}
    assert reassign.ongoing_text(ongoing) == ("Current partition reassignments:\n"
                                              "s-1: replicas: 4,5. adding: 5.\n"
                                              "t-0: replicas: 1,2,3. adding: 3. removing: 1.")
    assert reassign.cancellable(ongoing, {("t", 0), ("t", 1)}) == [("t", 0)]


# ---- elect-leaders ----------------------------------------------------------------------------------------------
def test_election_type_is_case_insensitive_and_checked():
    assert parse("elect-leaders", "--election-type", "preferred", "--all-topic-partitions").election_type == \
        "PREFERRED"
    code, _, err = run_cli("elect-leaders", "--election-type", "dirty", "--all-topic-partitions")
    assert code == 2 and "PREFERRED or UNCLEAN" in err


@pytest.mark.parametrize("argv,problem", [
    ([], "exactly one of"),
    (["--all-topic-partitions", "--topic", "t", "--partition", "0"], "exactly one of"),
    (["--topic", "t"], "--partition is required"),
    (["--all-topic-partitions", "--partition", "1"], "--partition is only valid with --topic"),
])
def test_elect_leaders_usage_problems(argv, problem):
    code, _, err = run_cli("elect-leaders", "--bootstrap-server", UNREACHABLE, "--election-type", "PREFERRED", *argv)
    assert code == 2 and problem in err


def test_election_partitions_file(tmp_path):
    assert elect_leaders.parse_partitions_file('{"partitions":[{"topic":"b","partition":1},'
                                               '{"topic":"a","partition":2}]}') == [("a", 2), ("b", 1)]
    with pytest.raises(elect_leaders.UsageError, match="duplicate partitions: a-2"):
        elect_leaders.parse_partitions_file('{"partitions":[{"topic":"a","partition":2},{"topic":"a","partition":2}]}')
    with pytest.raises(elect_leaders.UsageError, match='missing "partitions"'):
        elect_leaders.parse_partitions_file('{"topics":[]}')
    path = tmp_path / "p.json"
    path.write_text('{"partitions":[{"topic":"a"}]}')
    code, _, err = run_cli("elect-leaders", "--bootstrap-server", UNREACHABLE, "--election-type", "UNCLEAN",
                           "--path-to-json-file", str(path))
    assert code == 2 and '"topic" and "partition"' in err


def test_election_report_counts_not_needed_as_success():
    results = {("t", 0): Outcome(), ("t", 1): Outcome(ErrorCode.election_not_needed),
               ("s", 0): Outcome(ErrorCode.election_not_needed)}
    out, err, code = elect_leaders.election_report("PREFERRED", results)
    assert out == ["Successfully completed leader election (PREFERRED) for partitions t-0",
                   "Valid replica already elected for partitions s-0, t-1"]
    assert err == [] and code == 0
    results[("t", 2)] = Outcome(ErrorCode.preferred_leader_not_available, "Failed to elect leader for partition t-2")
    out, err, code = elect_leaders.election_report("PREFERRED", results)
    assert code == 1 and err == [
        "Error completing leader election (PREFERRED) for partition: t-2: PREFERRED_LEADER_NOT_AVAILABLE: "
        "Failed to elect leader for partition t-2",
        "1 replica(s) could not be elected"]


# ---- admin client -----------------------------------------------------------------------------------------------
def test_outcome_text_uses_kafkas_error_names():
    assert Outcome(ErrorCode.topic_already_exists, "Topic 'a' already exists.").text() == \
        "TOPIC_ALREADY_EXISTS: Topic 'a' already exists."
    assert Outcome(ErrorCode.invalid_partitions).text() == "INVALID_PARTITIONS"
    assert kafka_topic_id(uuid.UUID(int=0)) is None


def test_version_negotiation_picks_the_highest_common_version():
    conn = object.__new__(BrokerConnection)
    conn.address = "b:1"
    conn.api_versions = {19: (2, 7), 3: (0, 13), 37: (0, 1), 32: (0, 0)}
    assert conn.version_for(19) == 7 and conn.version_for(3) == 12 and conn.version_for(37) == 1
    with pytest.raises(UnsupportedApi, match="does not support ElectLeaders"):
        conn.version_for(43)
    with pytest.raises(UnsupportedApi, match="serves DescribeConfigs v0-0, this tool speaks v1-4"):
        conn.version_for(32)


class FakeBroker:
    """Speaks just enough Kafka (via kio) to drive the admin client: ApiVersions
    with a chosen table, Metadata with one broker, CreateTopics that refuses a
    name already taken. Records every api key it was sent."""

    def __init__(self, advertised: dict[int, tuple[int, int]]):
        self.advertised = advertised
        self.received: list[int] = []
        self.topics: set[str] = set()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            while True:
                head = conn.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    return
                frame = conn.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
                api_key, version, correlation_id = peek_header(frame)
                self.received.append(api_key)
                if api_key not in self.advertised:
                    return  # as Kafka: an unknown key closes the connection
                _, request = decode_request(api_key, version, frame)
                conn.sendall(encode_response(self._answer(api_key, version, request), correlation_id))

    def _answer(self, api_key: int, version: int, request):
        schema = response_schema(api_key, version)
        zero = datetime.timedelta(0)
        if api_key == 18:
            entry = nested(schema, "ApiVersion")
            return build(schema, error_code=ErrorCode.none, throttle_time=zero, api_keys=tuple(
                build(entry, api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in self.advertised.items()))
        if api_key == 3:
            return build(schema, throttle_time=zero, cluster_id="c", controller_id=0, topics=(), brokers=(
                build(nested(schema, "MetadataResponseBroker"), node_id=0, host="127.0.0.1", port=self.port,
                      rack=None),))
        if api_key == 19:
            results = []
            for t in request.topics:
                taken = t.name in self.topics
                self.topics.add(t.name)
                results.append(build(nested(schema, "CreatableTopicResult"), name=t.name, topic_id=None,
                                     error_code=ErrorCode.topic_already_exists if taken else ErrorCode.none,
                                     error_message=f"Topic '{t.name}' already exists." if taken else None,
                                     num_partitions=-1, replication_factor=-1, configs=None))
            return build(schema, throttle_time=zero, topics=tuple(results))
        raise AssertionError(api_key)

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def fake_broker():
    broker = FakeBroker({18: (0, 4), 3: (0, 12), 19: (2, 7)})
    yield broker
    broker.close()


def test_create_through_a_fake_broker_and_the_exit_status(fake_broker):
    code, out, err = run_cli("topics", "--bootstrap-server", fake_broker.bootstrap, "--create", "--topic", "t1")
    assert (code, out, err) == (0, "Created topic t1.\n", "")
    code, out, err = run_cli("topics", "--bootstrap-server", fake_broker.bootstrap, "--create", "--topic", "t1")
    assert code == 1 and "TOPIC_ALREADY_EXISTS: Topic 't1' already exists." in err
    code, out, err = run_cli("topics", "--bootstrap-server", fake_broker.bootstrap, "--create", "--topic", "t1",
                             "--if-not-exists")
    assert (code, out, err) == (0, "", "")


def test_an_api_the_broker_lacks_is_never_sent(fake_broker):
    code, _, err = run_cli("elect-leaders", "--bootstrap-server", fake_broker.bootstrap, "--election-type",
                           "PREFERRED", "--all-topic-partitions")
    assert code == 1 and "UNSUPPORTED_VERSION" in err and "ElectLeaders" in err
    path_code, _, path_err = run_cli("reassign", "--bootstrap-server", fake_broker.bootstrap, "--list")
    assert path_code == 1 and "ListPartitionReassignments" in path_err
    assert 43 not in fake_broker.received and 46 not in fake_broker.received
    assert fake_broker.received.count(18) >= 2  # every connection negotiated first
