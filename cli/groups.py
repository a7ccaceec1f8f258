"""`raykafka groups`: consumer-group administration over the Kafka protocol,
like Kafka's kafka-consumer-groups.sh (works against any Kafka broker).

    raykafka groups list     [--bootstrap-server H:P] [--state STATE ...]
    raykafka groups describe GROUP [--bootstrap-server H:P]
    raykafka groups reset-offsets GROUP --topic T[:P,P...] (--to-earliest | --to-latest |
                    --to-offset N | --to-datetime ISO) [--execute]
    raykafka groups delete   GROUP [--bootstrap-server H:P]

`reset-offsets` prints the plan and changes nothing unless --execute is
given; like Kafka it refuses while the group has active members.
"""
from __future__ import annotations

import argparse
import datetime
import socket
import struct
import sys
from typing import Any, Optional

from core.error_codes import ErrorCode

from net.codec import decode_response, encode_request, request_schema

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
LATEST, EARLIEST = -1, -2

# Protocol versions this tool speaks (served by raykafka and by Kafka 2.4+).
V_METADATA = 9
V_FIND_COORDINATOR = 3
V_LIST_GROUPS = 4
V_DESCRIBE_GROUPS = 5
V_OFFSET_FETCH = 7
V_OFFSET_COMMIT = 8
V_LIST_OFFSETS = 7
V_DELETE_GROUPS = 2


class GroupsError(Exception):
    pass


class _Connection:
    def __init__(self, host: str, port: int, timeout_s: float, security=None):
        from cli.client_security import AuthenticationFailed, authenticate, secure_socket

        self.sock = secure_socket(socket.create_connection((host, port), timeout=timeout_s), host, security)
        self.correlation_id = 0
        try:  # --command-config: SaslHandshake v1, SaslAuthenticate v2
            authenticate(lambda key, **fields: self.request(key, {17: 1, 36: 2}[key], **fields), security)
        except AuthenticationFailed as exc:
            raise GroupsError(f"authentication with {host}:{port} failed: {exc}") from None

    def request(self, api_key: int, version: int, **fields) -> Any:
        self.correlation_id += 1
        body = request_schema(api_key, version)(**fields)
        self.sock.sendall(encode_request(body, self.correlation_id, client_id="raykafka-groups"))
        size = struct.unpack(">i", self._exactly(4))[0]
        correlation_id, response = decode_response(api_key, version, self._exactly(size))
        if correlation_id != self.correlation_id:
            raise GroupsError("response out of order")
        return response

    def _exactly(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise GroupsError("the broker closed the connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


class Cluster:
    """A bootstrap connection, the brokers it names, one connection per broker."""

    def __init__(self, bootstrap: str, timeout_s: float = 30.0, security=None):
        self.timeout_s = timeout_s
        self.security = security
        self.connections: dict[int, _Connection] = {}
        self.bootstrap: Optional[_Connection] = None
        errors = []
        for address in bootstrap.split(","):
            try:
                self.bootstrap = _Connection(*_split(address), timeout_s, security)
                break
            except (OSError, ValueError) as exc:
                errors.append(f"{address}: {exc}")
        if self.bootstrap is None:
            raise GroupsError("cannot connect to " + "; ".join(errors))
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, dict[int, int]] = {}  # topic -> partition -> leader
        self.refresh()

    def refresh(self, topics: Optional[list[str]] = None) -> None:
        from kio.schema.metadata.v9.request import MetadataRequestTopic

        wanted = None if topics is None else tuple(MetadataRequestTopic(name=t) for t in topics)
        md = self.bootstrap.request(3, V_METADATA, topics=wanted, allow_auto_topic_creation=False,
                                    include_cluster_authorized_operations=False,
                                    include_topic_authorized_operations=False)
        self.brokers = {b.node_id: (b.host, b.port) for b in md.brokers}
        for t in md.topics:
            if t.error_code == ErrorCode.none and not t.is_internal:
                self.topics[t.name] = {p.partition_index: p.leader_id for p in t.partitions}

    def broker(self, broker_id: int) -> _Connection:
        conn = self.connections.get(broker_id)
        if conn is None:
            if broker_id not in self.brokers:
                raise GroupsError(f"broker {broker_id} is not in the cluster metadata")
            conn = self.connections[broker_id] = _Connection(*self.brokers[broker_id], self.timeout_s, self.security)
        return conn

    def coordinator(self, group: str) -> _Connection:
        answer = self.bootstrap.request(10, V_FIND_COORDINATOR, key=group, key_type=0)
        if answer.error_code != ErrorCode.none:
            raise GroupsError(f"no coordinator for group {group!r}: {answer.error_code.name}")
        self.brokers.setdefault(answer.node_id, (answer.host, answer.port))
        return self.broker(answer.node_id)

    def close(self) -> None:
        for conn in [self.bootstrap, *self.connections.values()]:
            try:
                conn.close()
            except OSError:
                pass

    # ---- group calls ------------------------------------------------------------------------------
    def list_groups(self, states: list[str]) -> list[tuple[str, str, str]]:
        found: dict[str, tuple[str, str, str]] = {}
        for broker_id in sorted(self.brokers):
            answer = self.broker(broker_id).request(16, V_LIST_GROUPS, states_filter=tuple(states))
            if answer.error_code != ErrorCode.none:
                raise GroupsError(f"ListGroups on broker {broker_id}: {answer.error_code.name}")
            for g in answer.groups:
                found[g.group_id] = (g.group_id, g.protocol_type, g.group_state)
        return [found[k] for k in sorted(found)]

    def describe(self, group: str):
        answer = self.coordinator(group).request(15, V_DESCRIBE_GROUPS, groups=(group,),
                                                 include_authorized_operations=False)
        [described] = answer.groups
        if described.error_code != ErrorCode.none:
            raise GroupsError(f"DescribeGroups {group!r}: {described.error_code.name}")
        return described

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        answer = self.coordinator(group).request(9, V_OFFSET_FETCH, group_id=group, topics=None,
                                                 require_stable=False)
        if answer.error_code != ErrorCode.none:
            raise GroupsError(f"OffsetFetch {group!r}: {answer.error_code.name}")
        out = {}
        for t in answer.topics:
            for p in t.partitions:
                if p.error_code == ErrorCode.none and p.committed_offset >= 0:
                    out[(t.name, p.partition_index)] = p.committed_offset
        return out

    def list_offsets(self, partitions: list[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
        """Offsets at ``timestamp`` (LATEST/EARLIEST or epoch ms) from each partition's leader."""
        from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsTopic

        by_leader: dict[int, dict[str, list[int]]] = {}
        for topic, p in partitions:
            leader = self.topics.get(topic, {}).get(p, -1)
            if leader < 0:
                raise GroupsError(f"{topic}-{p} has no leader")
            by_leader.setdefault(leader, {}).setdefault(topic, []).append(p)
        out = {}
        for leader, topics in by_leader.items():
            answer = self.broker(leader).request(2, V_LIST_OFFSETS, replica_id=-1, isolation_level=0, topics=tuple(
                ListOffsetsTopic(name=t, partitions=tuple(
                    ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=timestamp)
                    for p in ps)) for t, ps in topics.items()))
            for t in answer.topics:
                for p in t.partitions:
                    if p.error_code != ErrorCode.none:
                        raise GroupsError(f"ListOffsets {t.name}-{p.partition_index}: {p.error_code.name}")
                    out[(t.name, p.partition_index)] = p.offset
        return out

    def commit(self, group: str, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], ErrorCode]:
        from kio.schema.offset_commit.v8.request import OffsetCommitRequestPartition, OffsetCommitRequestTopic

        topics: dict[str, list[tuple[int, int]]] = {}
        for (t, p), o in sorted(offsets.items()):
            topics.setdefault(t, []).append((p, o))
        answer = self.coordinator(group).request(
            8, V_OFFSET_COMMIT, group_id=group, generation_id_or_member_epoch=-1, member_id="",
            group_instance_id=None, topics=tuple(OffsetCommitRequestTopic(name=t, partitions=tuple(
                OffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                                             committed_metadata="") for p, o in ps)) for t, ps in topics.items()))
        return {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}

    def delete(self, group: str) -> ErrorCode:
        answer = self.coordinator(group).request(42, V_DELETE_GROUPS, groups_names=(group,))
        return answer.results[0].error_code


# ---- consumer protocol assignment (what describe shows per member) --------------------------------------
def decode_assignment(data: bytes) -> dict[str, list[int]]:
    """ConsumerProtocolAssignment -> {topic: [partitions]} (any version: the
    v0 prefix is what every version starts with)."""
    if not data or len(data) < 6:
        return {}
    pos = 2
    out: dict[str, list[int]] = {}
    try:
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(max(count, 0)):
            (length,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = data[pos:pos + length].decode()
            pos += length
            (n,) = struct.unpack_from(">i", data, pos)
            pos += 4
            out[topic] = list(struct.unpack_from(f">{max(n, 0)}i", data, pos))
            pos += 4 * max(n, 0)
    except struct.error:
        return out
    return out


def _table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


# ---- commands ----------------------------------------------------------------------------------------------
def cmd_list(cluster: Cluster, args) -> int:
    groups = cluster.list_groups(args.state or [])
    if args.state:
        print(_table([[g, s] for g, _t, s in groups], ["GROUP", "STATE"]))
    else:
        for group, _type, _state in groups:
            print(group)
    return 0


def cmd_describe(cluster: Cluster, args) -> int:
    group = args.group
    described = cluster.describe(group)
    if described.group_state == "Dead":
        print(f"Consumer group '{group}' does not exist.", file=sys.stderr)
        return 1
    committed = cluster.committed(group)
    owner: dict[tuple[str, int], Any] = {}
    for m in described.members:
        for topic, parts in decode_assignment(bytes(m.member_assignment)).items():
            for p in parts:
                owner[(topic, p)] = m
    partitions = sorted(set(committed) | set(owner))
    cluster.refresh(sorted({t for t, _ in partitions}) or None)
    ends = cluster.list_offsets([tp for tp in partitions if tp[0] in cluster.topics], LATEST) if partitions else {}
    print(f"GROUP {group}  STATE {described.group_state}  PROTOCOL {described.protocol_data or '-'}  "
          f"MEMBERS {len(described.members)}")
    if described.members:
        print()
        rows = []
        for m in described.members:
            assignment = decode_assignment(bytes(m.member_assignment))
            text = ",".join(f"{t}:{'/'.join(map(str, sorted(ps)))}" for t, ps in sorted(assignment.items())) or "-"
            rows.append([m.member_id, m.group_instance_id or "-", m.client_host, m.client_id, text])
        print(_table(rows, ["CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "ASSIGNMENT"]))
    else:
        print(f"\nConsumer group '{group}' has no active members.")
    print()
    rows = []
    for tp in partitions:
        current, end = committed.get(tp), ends.get(tp)
        lag = end - current if current is not None and end is not None and end >= 0 else "-"
        m = owner.get(tp)
        rows.append([group, tp[0], tp[1], "-" if current is None else current, "-" if end is None else end, lag,
                     m.member_id if m else "-", m.client_host if m else "-", m.client_id if m else "-"])
    print(_table(rows, ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                        "HOST", "CLIENT-ID"]))
    return 0


def _parse_datetime(text: str) -> int:
    try:
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise GroupsError(f"--to-datetime: cannot parse {text!r} (e.g. 2024-01-31T12:00:00.000)") from None
    if when.tzinfo is None:
        when = when.astimezone()  # local time, as kafka-consumer-groups.sh
    return int(when.timestamp() * 1000)


def cmd_reset_offsets(cluster: Cluster, args) -> int:
    group = args.group
    described = cluster.describe(group)
    if described.group_state not in ("Empty", "Dead"):
        print(f"Error: Assignments can only be reset if the group '{group}' is inactive, but the current state is "
              f"{described.group_state}.", file=sys.stderr)
        return 1
    partitions: list[tuple[str, int]] = []
    for spec in args.topic:
        topic, _, parts = spec.partition(":")
        cluster.refresh([topic])
        if topic not in cluster.topics:
            raise GroupsError(f"topic {topic!r} does not exist")
        chosen = [int(p) for p in parts.split(",")] if parts else sorted(cluster.topics[topic])
        partitions.extend((topic, p) for p in chosen)
    earliest = cluster.list_offsets(partitions, EARLIEST)
    latest = cluster.list_offsets(partitions, LATEST)
    if args.to_earliest:
        plan = dict(earliest)
    elif args.to_latest:
        plan = dict(latest)
    elif args.to_offset is not None:
        plan = {tp: min(max(args.to_offset, earliest[tp]), latest[tp]) for tp in partitions}
    else:
        found = cluster.list_offsets(partitions, _parse_datetime(args.to_datetime))
        plan = {tp: latest[tp] if found[tp] < 0 else found[tp] for tp in partitions}
    print(_table([[group, t, p, plan[(t, p)]] for t, p in partitions], ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]))
    if not args.execute:
        print("\n(dry run: nothing changed; add --execute to commit these offsets)")
        return 0
    errors = {tp: e for tp, e in cluster.commit(group, plan).items() if e != ErrorCode.none}
    if errors:
        for (t, p), e in sorted(errors.items()):
            print(f"Error: {t}-{p}: {e.name}", file=sys.stderr)
        return 1
    return 0


def cmd_delete(cluster: Cluster, args) -> int:
    error = cluster.delete(args.group)
    if error == ErrorCode.none:
        print(f"Deletion of requested consumer groups ('{args.group}') was successful.")
        return 0
    print(f"Error: Deletion of consumer group '{args.group}' failed: {error.name}", file=sys.stderr)
    return 1


def add_parser(sub) -> None:
    """Register `groups` under the raykafka command's subparsers."""
    # Accepted before or after the action; the leaves do not overwrite a value given before.
    top = argparse.ArgumentParser(add_help=False)
    top.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, help="HOST:PORT[,HOST:PORT...]")
    top.add_argument("--timeout", type=float, default=30.0, help="socket timeout in seconds")
    top.add_argument("--command-config", metavar="FILE", help="client properties (security.protocol, sasl.*, ssl.*)")
    top.add_argument("--log-level", default="WARNING", help=argparse.SUPPRESS)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap-server", default=argparse.SUPPRESS, help="HOST:PORT[,HOST:PORT...]")
    common.add_argument("--timeout", type=float, default=argparse.SUPPRESS, help="socket timeout in seconds")
    common.add_argument("--command-config", default=argparse.SUPPRESS, metavar="FILE", help="client properties")
    groups = sub.add_parser("groups", help="list, describe, reset offsets of and delete consumer groups",
                            parents=[top])
    actions = groups.add_subparsers(dest="groups_command", required=True)
    listing = actions.add_parser("list", parents=[common], help="list the groups")
    listing.add_argument("--state", action="append", help="only groups in this state (repeatable)")
    describe = actions.add_parser("describe", parents=[common], help="members, assignment and lag")
    describe.add_argument("group")
    reset = actions.add_parser("reset-offsets", parents=[common], help="set committed offsets (dry run by default)")
    reset.add_argument("group")
    reset.add_argument("--topic", action="append", required=True, help="TOPIC or TOPIC:P,P (repeatable)")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=int)
    target.add_argument("--to-datetime", help="ISO 8601, e.g. 2024-01-31T12:00:00.000 (local time unless an offset "
                                              "is given)")
    reset.add_argument("--execute", action="store_true", help="commit the new offsets")
    delete = actions.add_parser("delete", parents=[common], help="delete an empty group and its offsets")
    delete.add_argument("group")


COMMANDS = {"list": cmd_list, "describe": cmd_describe, "reset-offsets": cmd_reset_offsets, "delete": cmd_delete}


def run(args) -> int:
    try:
        from cli.client_security import load_security

        cluster = Cluster(args.bootstrap_server, args.timeout, load_security(args.command_config))
    except (GroupsError, OSError, ValueError) as exc:
        print(f"raykafka groups: {exc}", file=sys.stderr)
        return 2
    try:
        return COMMANDS[args.groups_command](cluster, args)
    except (GroupsError, OSError) as exc:
        print(f"raykafka groups: {exc}", file=sys.stderr)
        return 1
    finally:
        cluster.close()
