"""`raykafka topics`, `raykafka reassign` and `raykafka elect-leaders` against
real brokers: the shared single broker for topic administration, one 3-node
cluster (`raykafka start --nodes 3`) for moving replicas, preferred election
and the under-replicated report after a node dies."""
from __future__ import annotations

import json
import subprocess
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from cli.admin_client import AdminClient
from tests.broker_process import RAYKAFKA, REPO, broker_env
from tests.cli_runner import CliResult, run_cli, wait_for


def cli(bootstrap: str, *args: str, expect: int | None = 0) -> CliResult:
    """`raykafka ARGS --bootstrap-server ...` in this process."""
    return run_cli([*args, "--bootstrap-server", bootstrap], expect)


def described(bootstrap: str, topic: str, *report: str) -> tuple[dict[str, str], dict[int, dict[str, str]]]:
    """--describe parsed: the topic line's fields and each partition line's fields."""
    out = cli(bootstrap, "topics", "--describe", "--topic", topic, *report).stdout
    head: dict[str, str] = {}
    partitions: dict[int, dict[str, str]] = {}
    for line in out.splitlines():
        fields = dict(f.split(": ", 1) if ": " in f else (f.rstrip(":"), "") for f in line.strip("\t").split("\t"))
        if line.startswith("\t"):
            partitions[int(fields["Partition"])] = fields
        else:
            head = fields
    return head, partitions


def broker_ids(bootstrap: str) -> list[int]:
    with AdminClient(bootstrap) as client:
        return sorted(client.metadata([]).brokers)


# ---- the shared broker ------------------------------------------------------------------------------------------
def test_topics_create_list_describe_alter_configs_delete(broker, topic_name):
    bootstrap = broker.bootstrap
    [only] = broker_ids(bootstrap)
    created = cli(bootstrap, "topics", "--create", "--topic", topic_name, "--partitions", "3",
                  "--replication-factor", "1", "--config", "cleanup.policy=compact", "--config", "retention.ms=123456")
    assert created.stdout == f"Created topic {topic_name}.\n"
    # The installed command, once (the rest run in-process).
    listed = subprocess.run([str(RAYKAFKA), "topics", "--bootstrap-server", bootstrap, "--list"],
                            capture_output=True, text=True, timeout=60, env=broker_env(), cwd=REPO)
    assert listed.returncode == 0 and topic_name in listed.stdout.splitlines(), listed.stderr
    assert "__consumer_offsets" not in cli(bootstrap, "topics", "--list", "--exclude-internal").stdout.split()

    head, partitions = described(bootstrap, topic_name)
    assert head["Topic"] == topic_name and head["PartitionCount"] == "3" and head["ReplicationFactor"] == "1"
    assert len(head["TopicId"]) == 22  # Kafka's base64 form of a 16-byte id
    overrides = dict(kv.split("=", 1) for kv in head["Configs"].split(","))
    assert overrides["cleanup.policy"] == "compact" and overrides["retention.ms"] == "123456"
    assert sorted(partitions) == [0, 1, 2]
    for p in partitions.values():
        assert (p["Leader"], p["Replicas"], p["Isr"]) == (str(only), str(only), str(only))
    for report in ("--under-replicated-partitions", "--unavailable-partitions", "--under-min-isr-partitions"):
        assert cli(bootstrap, "topics", "--describe", "--topic", topic_name, report).stdout == ""
    assert len(described(bootstrap, topic_name, "--at-min-isr-partitions")[1]) == 3  # ISR 1 == min.insync 1

    cli(bootstrap, "topics", "--alter", "--topic", topic_name, "--config", "retention.ms=1000",
        "--delete-config", "cleanup.policy")
    overrides = dict(kv.split("=", 1) for kv in described(bootstrap, topic_name)[0]["Configs"].split(","))
    assert overrides["retention.ms"] == "1000" and "cleanup.policy" not in overrides
    refused = cli(bootstrap, "topics", "--alter", "--topic", topic_name, "--config", "retention.ms=soon", expect=1)
    assert "INVALID_CONFIG" in refused.stderr

    again = cli(bootstrap, "topics", "--create", "--topic", topic_name, expect=1)
    assert "TOPIC_ALREADY_EXISTS" in again.stderr
    cli(bootstrap, "topics", "--create", "--topic", topic_name, "--if-not-exists")
    assert "INVALID_CONFIG" in cli(bootstrap, "topics", "--create", "--topic", f"{topic_name}-c",
                                   "--config", "no.such.config=1", expect=1).stderr
    assert "INVALID_REPLICATION_FACTOR" in cli(bootstrap, "topics", "--create", "--topic", f"{topic_name}-rf",
                                               "--replication-factor", "3", expect=1).stderr
    assert "INVALID_REPLICA_ASSIGNMENT" in cli(bootstrap, "topics", "--create", "--topic", f"{topic_name}-ra",
                                               "--replica-assignment", "99", expect=1).stderr
    cli(bootstrap, "topics", "--create", "--topic", f"{topic_name}-m", "--replica-assignment", f"{only},{only}")
    head, partitions = described(bootstrap, f"{topic_name}-m")
    assert head["PartitionCount"] == "2" and {p["Replicas"] for p in partitions.values()} == {str(only)}

    assert cli(bootstrap, "topics", "--delete", "--topic", f"{topic_name}(-m)?").stdout.splitlines() == \
        [f"Deleted topic {topic_name}.", f"Deleted topic {topic_name}-m."]
    wait_for(lambda: topic_name not in cli(bootstrap, "topics", "--list").stdout.split(), 30, "the topic to go")
    gone = cli(bootstrap, "topics", "--describe", "--topic", topic_name, expect=1)
    assert f"Topic '{topic_name}' does not exist as expected" in gone.stderr
    cli(bootstrap, "topics", "--describe", "--topic", topic_name, "--if-exists")
    cli(bootstrap, "topics", "--delete", "--topic", topic_name, expect=1)


def test_topics_alter_partitions(broker, topic_name):
    """Needs CreatePartitions (37) served by the broker."""
    bootstrap = broker.bootstrap
    cli(bootstrap, "topics", "--create", "--topic", topic_name, "--partitions", "2")
    added = cli(bootstrap, "topics", "--alter", "--topic", topic_name, "--partitions", "4")
    assert "Adding partitions succeeded" in added.stdout
    head, partitions = described(bootstrap, topic_name)
    assert head["PartitionCount"] == "4" and sorted(partitions) == [0, 1, 2, 3]
    assert all(p["Leader"] != "none" for p in partitions.values())
    fewer = cli(bootstrap, "topics", "--alter", "--topic", topic_name, "--partitions", "3", expect=1)
    assert "INVALID_PARTITIONS" in fewer.stderr


def test_elect_leaders_on_one_broker(broker, topic_name):
    """Needs ElectLeaders (43): with one replica per partition, the preferred
    leader already leads everywhere, which is success for the exit status."""
    bootstrap = broker.bootstrap
    cli(bootstrap, "topics", "--create", "--topic", topic_name, "--partitions", "2")
    one = cli(bootstrap, "elect-leaders", "--election-type", "preferred", "--topic", topic_name, "--partition", "1")
    assert one.stdout == f"Valid replica already elected for partitions {topic_name}-1\n"
    cli(bootstrap, "elect-leaders", "--election-type", "PREFERRED", "--all-topic-partitions")
    missing = cli(bootstrap, "elect-leaders", "--election-type", "PREFERRED", "--topic", topic_name,
                  "--partition", "9", expect=1)
    assert f"for partition: {topic_name}-9: UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr


# ---- three brokers ----------------------------------------------------------------------------------------------
def produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failed = []
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=f"{p}-{i}".encode(), partition=p,
                             on_delivery=lambda err, msg: err and failed.append(err))
    assert producer.flush(60) == 0 and not failed, failed[:3]


def consume_values(bootstrap: str, topic: str, partition: int, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cli-admin", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    values = []
    deadline = time.monotonic() + 60
    while len(values) < count and time.monotonic() < deadline:
        for m in consumer.consume(100, timeout=0.5):
            assert m.error() is None, m.error()
            values.append(m.value())
    consumer.close()
    return values


def test_reassign_and_elect_leaders_on_three_brokers(three_nodes, tmp_path):
    """Needs AlterPartitionReassignments (45), ListPartitionReassignments (46)
    and ElectLeaders (43), on the session's shared 3-node cluster (whole again)."""
    cluster = three_nodes
    bootstrap = cluster.bootstrap_all
    nodes = cluster.nodes()
    # a: the head node (it hosts the active controller), so b can be killed at the end.
    a, b, c = (n["broker_id"] for n in nodes)
    assert broker_ids(bootstrap) == sorted((a, b, c))
    topic = "moving"
    cli(bootstrap, "topics", "--create", "--topic", topic, "--replica-assignment", f"{a}:{b},{b}:{c}")
    wait_for(lambda: all(len(p["Isr"].split(",")) == 2 for p in described(bootstrap, topic)[1].values()), 60,
             "both replicas in sync")
    produce(bootstrap, topic, 2, 200)

    to_move = tmp_path / "topics.json"
    to_move.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    generated = cli(bootstrap, "reassign", "--generate", "--topics-to-move-json-file", str(to_move),
                    "--broker-list", f"{a},{b},{c}").stdout.splitlines()
    assert generated[0] == "Current partition replica assignment"
    assert json.loads(generated[1]) == {"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [a, b], "log_dirs": ["any", "any"]},
        {"topic": topic, "partition": 1, "replicas": [b, c], "log_dirs": ["any", "any"]}]}
    assert generated[3] == "Proposed partition reassignment configuration"
    proposal = json.loads(generated[4])["partitions"]
    assert [p["partition"] for p in proposal] == [0, 1]
    assert all(len(set(p["replicas"])) == 2 and set(p["replicas"]) <= {a, b, c} for p in proposal)

    # Partition 0 leaves broker a for c (c must copy the log); partition 1 only changes its preferred leader.
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [c, b]},
        {"topic": topic, "partition": 1, "replicas": [c, b]}]}))
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "replicas": [99]}]}))
    assert "Unknown broker id 99" in cli(bootstrap, "reassign", "--execute", "--reassignment-json-file",
                                         str(unknown), expect=1).stderr
    executed = cli(bootstrap, "reassign", "--execute", "--reassignment-json-file", str(plan)).stdout
    lines = executed.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert json.loads(lines[2])["partitions"][0]["replicas"] == [a, b]  # what a rollback needs
    assert lines[4] == "Save this to use as the --reassignment-json-file option during rollback"
    assert lines[5] == f"Successfully started partition reassignments for {topic}-0,{topic}-1"

    def verified():
        result = cli(bootstrap, "reassign", "--verify", "--reassignment-json-file", str(plan), expect=None)
        assert result.returncode in (0, 3), result.stderr + result.stdout
        return result.returncode == 0 and result

    done = wait_for(verified, 120, "the reassignment to complete")
    assert done.stdout.splitlines() == ["Status of partition reassignment:",
                                        f"Reassignment of partition {topic}-0 is completed.",
                                        f"Reassignment of partition {topic}-1 is completed."]
    assert cli(bootstrap, "reassign", "--list").stdout == "No partition reassignments found.\n"
    assert cli(bootstrap, "reassign", "--cancel", "--reassignment-json-file", str(plan)).stdout == \
        "None of the specified partition reassignments are active.\n"
    partitions = wait_for(lambda: (d := described(bootstrap, topic)[1]) and
                          all(len(p["Isr"].split(",")) == 2 for p in d.values()) and d, 60, "ISRs of two")
    assert partitions[0]["Replicas"] == partitions[1]["Replicas"] == f"{c},{b}"
    assert partitions[0]["Leader"] == str(c)  # a left: the first new replica in sync leads
    assert consume_values(bootstrap, topic, 0, 200) == [f"0-{i}".encode() for i in range(200)]

    # Partition 1's preferred leader is now c; an election puts it there (or finds it there).
    elected = cli(bootstrap, "elect-leaders", "--election-type", "PREFERRED", "--topic", topic,
                  "--partition", "1").stdout
    assert elected in (f"Successfully completed leader election (PREFERRED) for partitions {topic}-1\n",
                       f"Valid replica already elected for partitions {topic}-1\n")
    assert wait_for(lambda: described(bootstrap, topic)[1][1]["Leader"] == str(c), 30, "c to lead")
    cli(bootstrap, "elect-leaders", "--election-type", "PREFERRED", "--all-topic-partitions")

    # Broker b dies: both partitions lose a replica, neither its leader.
    cluster.kill_node(b)
    live = ",".join(f"{n['host']}:{n['port']}" for n in cluster.nodes() if n["broker_id"] != b)
    under = wait_for(lambda: described(live, topic, "--under-replicated-partitions")[1], 60,
                     "under-replicated partitions")
    assert sorted(under) == [0, 1] and all(p["Isr"] == str(c) for p in under.values())
    assert described(live, topic, "--unavailable-partitions")[1] == {}
    unclean = cli(live, "elect-leaders", "--election-type", "UNCLEAN", "--all-topic-partitions")
    assert unclean.returncode == 0
