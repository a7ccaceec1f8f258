"""`raykafka acls`: add, list and remove ACLs over the Kafka protocol
(CreateAcls / DescribeAcls / DeleteAcls), with kafka-acls.sh's options and output.

    raykafka acls --bootstrap-server H:P [--command-config FILE] --add
                  --allow-principal User:alice [--allow-host H] [--deny-principal P [--deny-host H]]
                  [--operation Read ...] --topic T | --group G | --transactional-id X | --cluster
                  [--resource-pattern-type literal|prefixed]
    raykafka acls --bootstrap-server H:P --list [--topic T ...] [--principal P] [--resource-pattern-type any|match|...]
    raykafka acls --bootstrap-server H:P --remove [--force] [principals, hosts, operations] --topic T ...

--producer / --consumer add or remove the ACLs a producer (WRITE, DESCRIBE,
CREATE on the topics; WRITE, DESCRIBE on the transactional id; with
--idempotent IDEMPOTENT_WRITE on the cluster) or a consumer (READ, DESCRIBE
on the topics, READ on the group) needs, as kafka-acls.sh does.
Exit status: 0 done; 1 the broker refused or could not be reached; 2 usage error.
"""
from __future__ import annotations

import argparse
import sys

from cli.admin_client import AdminClient, AdminError
from core.error_codes import ErrorCode
from net.codec import request_schema
from net.schema_build import build, nested
from cluster.security.acls import (CLUSTER_NAME, WILDCARD_HOST, AccessControlEntry, AccessControlEntryFilter,
                                   AclBinding, Operation, PatternType, PermissionType, ResourcePattern,
                                   ResourcePatternFilter, ResourceType, SUPPORTED_OPERATIONS)

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
CLIENT_VERSIONS = {DESCRIBE_ACLS: (1, 3), CREATE_ACLS: (1, 3), DELETE_ACLS: (1, 3)}
API_NAMES = {DESCRIBE_ACLS: "DescribeAcls", CREATE_ACLS: "CreateAcls", DELETE_ACLS: "DeleteAcls"}


class UsageError(Exception):
    pass


# ---- Kafka's toString forms, as kafka-acls.sh prints them ------------------------------------------------------
def pattern_text(resource_type: ResourceType, name: str | None, pattern_type: PatternType) -> str:
    return f"ResourcePattern(resourceType={resource_type.name}, name={name}, patternType={pattern_type.name})"


def entry_text(entry: AccessControlEntry) -> str:
    return (f"(principal={entry.principal}, host={entry.host}, operation={entry.operation.name}, "
            f"permissionType={entry.permission_type.name})")


# ---- from the options to filters and ACLs (pure) ---------------------------------------------------------------
def _principals(values: list[str] | None) -> list[str]:
    principals = []
    for value in values or ():
        kind, sep, name = value.strip().partition(":")
        if not sep or not kind or not name:
            raise UsageError(f"Invalid principal {value!r}: expected principalType:name (e.g. User:alice)")
        principals.append(f"{kind}:{name}")
    return principals


def _pattern_type(args) -> PatternType:
    try:
        return PatternType.parse(args.resource_pattern_type)
    except ValueError:
        raise UsageError(f"Unknown resource-pattern-type: {args.resource_pattern_type}") from None


def resource_filters(args, required: bool = True) -> list[ResourcePatternFilter]:
    """kafka-acls.sh's getResourceFilter: one filter per named resource."""
    pattern_type = _pattern_type(args)
    filters = [ResourcePatternFilter(ResourceType.TOPIC, t.strip(), pattern_type) for t in args.topic or ()]
    if pattern_type == PatternType.LITERAL and (args.cluster or args.idempotent):
        filters.append(ResourcePatternFilter(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    filters += [ResourcePatternFilter(ResourceType.GROUP, g.strip(), pattern_type) for g in args.group or ()]
    filters += [ResourcePatternFilter(ResourceType.TRANSACTIONAL_ID, t, pattern_type)
                for t in args.transactional_id or ()]
    if not filters and required:
        raise UsageError("You must provide at least one resource: --topic <topic> or --cluster or --group <group>")
    return list(dict.fromkeys(filters))


def _entries(args, operations: set[Operation]) -> set[AccessControlEntry]:
    allowed, denied = _principals(args.allow_principal), _principals(args.deny_principal)
    allow_hosts = [h.strip() for h in args.allow_host] if args.allow_host else ([WILDCARD_HOST] if allowed else [])
    deny_hosts = [h.strip() for h in args.deny_host] if args.deny_host else ([WILDCARD_HOST] if denied else [])
    entries = set()
    for principals, hosts, permission in ((allowed, allow_hosts, PermissionType.ALLOW),
                                          (denied, deny_hosts, PermissionType.DENY)):
        entries.update(AccessControlEntry(p, h, op, permission) for p in principals for h in hosts
                       for op in operations)
    return entries


def filter_to_entries(args) -> dict[ResourcePatternFilter, set[AccessControlEntry]]:
    """kafka-acls.sh's getResourceFilterToAcls (with --producer / --consumer shortcuts)."""
    if not args.producer and not args.consumer:
        try:
            operations = {Operation.parse(o) for o in (args.operation or ["All"])}
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        entries = _entries(args, operations)
        return {f: set(entries) for f in resource_filters(args)}
    pattern_type = _pattern_type(args)
    result: dict[ResourcePatternFilter, set[AccessControlEntry]] = {}

    def add(resource_type: ResourceType, names, operations: set[Operation], kind: PatternType = pattern_type):
        for name in names:
            key = ResourcePatternFilter(resource_type, name, kind)
            result.setdefault(key, set()).update(_entries(args, operations))

    if args.producer:
        add(ResourceType.TOPIC, args.topic or (), {Operation.WRITE, Operation.DESCRIBE, Operation.CREATE})
        add(ResourceType.TRANSACTIONAL_ID, args.transactional_id or (), {Operation.WRITE, Operation.DESCRIBE})
        if args.idempotent:
            add(ResourceType.CLUSTER, [CLUSTER_NAME], {Operation.IDEMPOTENT_WRITE}, PatternType.LITERAL)
    if args.consumer:
        add(ResourceType.TOPIC, args.topic or (), {Operation.READ, Operation.DESCRIBE})
        add(ResourceType.GROUP, args.group or (), {Operation.READ})
    return result


def usage_problem(args) -> str | None:
    actions = [a for a in ("add", "remove", "list") if getattr(args, a)]
    if len(actions) != 1:
        return "Command must include exactly one action: --list, --add, --remove. "
    if args.principal and not args.list:
        return "The --principal option is only available if --list is set"
    if args.producer and not args.topic:
        return "With --producer you must specify a --topic"
    if args.idempotent and not args.producer:
        return "The --idempotent option is only available if --producer is set"
    if args.consumer and (not args.topic or not args.group or args.cluster or args.transactional_id):
        return ("With --consumer you must specify a --topic and a --group and no --cluster or "
                "--transactional-id option should be specified.")
    try:
        pattern_type = _pattern_type(args)
        if args.add:
            if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
                return f"A '--resource-pattern-type' value of '{pattern_type.name}' is not valid when adding acls."
            mapping = filter_to_entries(args)
            if any(not entries for entries in mapping.values()):
                return "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."
            for f, entries in mapping.items():
                valid = SUPPORTED_OPERATIONS[f.resource_type] | {Operation.ALL}
                if any(e.operation not in valid for e in entries):
                    return (f"ResourceType {f.resource_type.name} only supports operations "
                            + ", ".join(sorted(o.pascal for o in valid)))
        elif args.remove:
            filter_to_entries(args)
        else:
            resource_filters(args, required=False)
            _principals(args.principal)
    except UsageError as exc:
        return str(exc)
    return None


# ---- talking to the broker -------------------------------------------------------------------------------------
class AclClient:
    """The ACL APIs over an AdminClient's bootstrap connection (any broker
    serves them: every broker reads the same ZooKeeper ACLs)."""

    def __init__(self, client: AdminClient):
        self.conn = client.bootstrap

    def _version(self, api_key: int) -> int:
        offered = self.conn.api_versions.get(api_key)
        low, high = CLIENT_VERSIONS[api_key]
        if offered is None or offered[1] < low or offered[0] > high:
            raise AdminError(f"{self.conn.address} does not serve {API_NAMES[api_key]}")
        return min(high, offered[1])

    def _request(self, api_key: int, nested_name: str | None = None, items=(), **fields):
        """One request at the negotiated version; `items` (dicts) become its `nested_name` entities."""
        version = self._version(api_key)
        schema = request_schema(api_key, version)
        if nested_name is not None:
            fields[_ITEMS_FIELD[api_key]] = tuple(build(nested(schema, nested_name), **i) for i in items)
        return self.conn._call(api_key, version, build(schema, **fields))

    def describe(self, pattern: ResourcePatternFilter) -> dict[ResourcePattern, set[AccessControlEntry]]:
        answer = self._request(
            DESCRIBE_ACLS, resource_type_filter=int(pattern.resource_type), resource_name_filter=pattern.name,
            pattern_type_filter=int(pattern.pattern_type), principal_filter=None, host_filter=None,
            operation=int(Operation.ANY), permission_type=int(PermissionType.ANY))
        _raise_for(answer.error_code, answer.error_message)
        found: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for r in answer.resources:
            key = ResourcePattern(ResourceType(r.resource_type), r.resource_name, PatternType(r.pattern_type))
            found.setdefault(key, set()).update(
                AccessControlEntry(a.principal, a.host, Operation(a.operation), PermissionType(a.permission_type))
                for a in r.acls)
        return found

    def create(self, bindings: list[AclBinding]) -> None:
        answer = self._request(CREATE_ACLS, "AclCreation", [dict(
            resource_type=int(b.pattern.resource_type), resource_name=b.pattern.name,
            resource_pattern_type=int(b.pattern.pattern_type), principal=b.entry.principal, host=b.entry.host,
            operation=int(b.entry.operation), permission_type=int(b.entry.permission_type)) for b in bindings])
        for result in answer.results:
            _raise_for(result.error_code, result.error_message)

    def delete(self, pattern: ResourcePatternFilter, entries: list[AccessControlEntryFilter]) -> None:
        answer = self._request(DELETE_ACLS, "DeleteAclsFilter", [dict(
            resource_type_filter=int(pattern.resource_type), resource_name_filter=pattern.name,
            pattern_type_filter=int(pattern.pattern_type), principal_filter=e.principal, host_filter=e.host,
            operation=int(e.operation), permission_type=int(e.permission_type)) for e in entries])
        for result in answer.filter_results:
            _raise_for(result.error_code, result.error_message)


_ITEMS_FIELD = {CREATE_ACLS: "creations", DELETE_ACLS: "filters"}


def _raise_for(code, message) -> None:
    if code != ErrorCode.none:
        name = ErrorCode(code).name.upper()
        raise AdminError(f"{name}: {message}" if message else name)


# ---- commands --------------------------------------------------------------------------------------------------
def _print_acls(acls: dict[ResourcePattern, set[AccessControlEntry]]) -> None:
    for pattern, entries in sorted(acls.items()):
        lines = "\n".join("\t" + entry_text(e) for e in sorted(entries))
        print(f"Current ACLs for resource `{pattern_text(*_fields(pattern))}`: \n {lines} \n")


def _fields(pattern) -> tuple:
    return pattern.resource_type, pattern.name, pattern.pattern_type


def _confirm(args, message: str) -> bool:
    if args.force:
        return True
    print(message)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def add_acls(client: AclClient, args) -> int:
    for f, entries in filter_to_entries(args).items():
        pattern = ResourcePattern(f.resource_type, f.name, f.pattern_type)
        lines = "\n".join("\t" + entry_text(e) for e in sorted(entries))
        print(f"Adding ACLs for resource `{pattern_text(*_fields(pattern))}`: \n {lines} \n")
        client.create([AclBinding(pattern, e) for e in sorted(entries)])
    return EXIT_OK


def remove_acls(client: AclClient, args) -> int:
    for f, entries in filter_to_entries(args).items():
        text = pattern_text(*_fields(f))
        if not entries:
            if _confirm(args, f"Are you sure you want to delete all ACLs for resource filter `{text}`? (y/n)"):
                client.delete(f, [AccessControlEntryFilter()])
        else:
            lines = "\n".join("\t" + entry_text(e) for e in sorted(entries))
            if _confirm(args, f"Are you sure you want to remove ACLs: \n {lines} \n from resource filter `{text}`? (y/n)"):
                client.delete(f, [AccessControlEntryFilter(e.principal, e.host, e.operation, e.permission_type)
                                  for e in sorted(entries)])
    return EXIT_OK


def list_acls(client: AclClient, args) -> int:
    filters = resource_filters(args, required=False) or [ResourcePatternFilter()]
    acls: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for f in filters:
        for pattern, entries in client.describe(f).items():
            acls.setdefault(pattern, set()).update(entries)
    principals = _principals(args.principal)
    if not principals:
        _print_acls(acls)
    for principal in principals:
        print(f"ACLs for principal `{principal}`")
        _print_acls({p: {e for e in entries if e.principal == principal} for p, entries in acls.items()
                     if any(e.principal == principal for e in entries)})
    return EXIT_OK


COMMANDS = {"add": add_acls, "remove": remove_acls, "list": list_acls}


def add_parser(sub) -> None:
    """Register `acls` under the raykafka command's subparsers."""
    p = sub.add_parser("acls", help="add, list and remove ACLs (kafka-acls.sh)",
                       description="Add, list and remove ACLs. Exit status: 0 done, 1 the broker refused or "
                                   "could not be reached, 2 usage error.")
    p.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, help="HOST:PORT[,HOST:PORT...]")
    p.add_argument("--command-config", metavar="FILE", help="client properties (security.protocol, sasl.*, ssl.*)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each request")
    p.add_argument("--log-level", default="WARNING", help=argparse.SUPPRESS)
    for action, text in (("add", "add ACLs"), ("remove", "remove ACLs"), ("list", "list ACLs")):
        p.add_argument(f"--{action}", action="store_true", help=text)
    p.add_argument("--allow-principal", action="append", metavar="TYPE:NAME", help="principal to allow (repeatable)")
    p.add_argument("--deny-principal", action="append", metavar="TYPE:NAME", help="principal to deny (repeatable)")
    p.add_argument("--allow-host", action="append", metavar="HOST", help="host for --allow-principal (default *)")
    p.add_argument("--deny-host", action="append", metavar="HOST", help="host for --deny-principal (default *)")
    p.add_argument("--principal", action="append", metavar="TYPE:NAME", help="--list: only this principal's ACLs")
    p.add_argument("--operation", action="append", metavar="OP",
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                        "AlterConfigs, IdempotentWrite, All (default All; repeatable)")
    p.add_argument("--topic", action="append", metavar="TOPIC", help="topic resource (repeatable; '*' = all)")
    p.add_argument("--group", action="append", metavar="GROUP", help="group resource (repeatable)")
    p.add_argument("--transactional-id", action="append", metavar="ID", help="transactional id resource")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type", default="LITERAL", metavar="TYPE",
                   help="literal or prefixed (--add); also any or match (--list, --remove); default literal")
    p.add_argument("--producer", action="store_true", help="the ACLs a producer needs")
    p.add_argument("--consumer", action="store_true", help="the ACLs a consumer needs")
    p.add_argument("--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE on the cluster")
    p.add_argument("--force", action="store_true", help="remove without asking")
    p.set_defaults(run_admin_command=run)


def run(args) -> int:
    problem = usage_problem(args)
    if problem is not None:
        print(f"raykafka acls: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.command_config:
            from cli.client_security import load_security  # TLS / SASL settings, Kafka's client keys

            admin = AdminClient(args.bootstrap_server, args.timeout, client_id="raykafka-acls",
                                security=load_security(args.command_config))
        else:
            admin = AdminClient(args.bootstrap_server, args.timeout, client_id="raykafka-acls")
    except (AdminError, OSError, ValueError) as exc:
        print(f"raykafka acls: {exc}", file=sys.stderr)
        return EXIT_FAILED
    try:
        action = next(a for a in ("add", "remove", "list") if getattr(args, a))
        return COMMANDS[action](AclClient(admin), args)
    except (AdminError, OSError) as exc:
        print(f"Error while executing ACL command: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        admin.close()
