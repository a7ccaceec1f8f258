"""`raykafka configs`: Kafka's kafka-configs.sh over the Kafka protocol.

    raykafka configs --bootstrap-server H:P [--command-config FILE] --describe|--alter
        --entity-type topics|brokers|users|clients (--entity-name NAME | --entity-default)
        [--entity-type ... for a user and client id together]
        [--add-config k=v,k2=[a=1,b=2]] [--delete-config k,k2] [--all]

topics / brokers: dynamic configs (DescribeConfigs, IncrementalAlterConfigs);
users / clients: client quotas (DescribeClientQuotas, AlterClientQuotas), and
for users SCRAM credentials too (`SCRAM-SHA-256=[iterations=8192,password=s]`,
AlterUserScramCredentials). Kafka's shortcuts --topic, --broker, --user,
--client, --broker-defaults, --user-defaults, --client-defaults work as well.

Exit status: 0 done, 1 the broker refused or could not be reached, 2 usage error.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
from typing import Optional

from core.config import is_sensitive_broker_key
from core.error_codes import ErrorCode

from cli.admin_client import (ALTER_CLIENT_QUOTAS, ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_CLIENT_QUOTAS,
                              DESCRIBE_CONFIGS, DESCRIBE_USER_SCRAM_CREDENTIALS, INCREMENTAL_ALTER_CONFIGS, OP_DELETE,
                              OP_SET, AdminClient, AdminError, Outcome)
from cli.client_security import SecurityConfigError, load_security
from net.codec import request_schema
from net.schema_build import build, nested

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
ENTITY_TYPES = ("topics", "brokers", "users", "clients")
RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
SCRAM_TYPES = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
SCRAM_NAMES = {kind: name for name, (kind, _) in SCRAM_TYPES.items()}
DEFAULT_SCRAM_ITERATIONS = 4096
# DescribeConfigs sources (Kafka's ConfigSource ids) and the names kafka-configs.sh prints.
SOURCE_NAMES = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
                4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG"}
DEFAULT = None  # an entity given by --entity-default


class UsageError(Exception):
    pass


class _Entity(argparse.Action):
    """--entity-type / --entity-name / --entity-default and the shortcuts, kept in
    command-line order: a name or default belongs to the type before it."""

    def __call__(self, parser, namespace, values, option_string=None):
        items = list(getattr(namespace, "entity_items", None) or [])
        kind = self.const
        if kind == "type":
            items.append(("type", values))
        elif kind == "name":
            items.append(("name", values))
        elif kind == "default":
            items.append(("name", DEFAULT))
        else:  # shortcut: (type, name) in one option
            entity_type, is_default = kind
            items.append(("type", entity_type))
            items.append(("name", DEFAULT if is_default else values))
        namespace.entity_items = items


def entities_of(items) -> list[tuple[str, Optional[str]]]:
    """[(entity type, name or DEFAULT)] from the ordered options; UsageError when they do not pair up."""
    out: list[list] = []
    for what, value in items or []:
        if what == "type":
            if value not in ENTITY_TYPES:
                raise UsageError(f"Invalid entity type {value}, the entity type must be one of "
                                 f"{', '.join(ENTITY_TYPES)}")
            out.append([value, "unset"])
        else:
            if not out or out[-1][1] != "unset":
                raise UsageError("--entity-name or --entity-default must follow an --entity-type")
            out[-1][1] = value
    if not out:
        raise UsageError("--entity-type must be specified")
    types = [t for t, _ in out]
    if len(types) != len(set(types)):
        raise UsageError("an --entity-type is given twice")
    if len(out) > 1 and set(types) != {"users", "clients"}:
        raise UsageError("only users and clients can be combined (a user's quota for one client id)")
    if len(out) > 1 and any(n == "unset" for _, n in out):
        raise UsageError("--entity-name or --entity-default must be given for each --entity-type")
    # Users first, as Kafka orders a (user, client id) entity; "unset": every entity of the type.
    return sorted((tuple(e) for e in out), key=lambda e: e[0] != "users")


def split_config(text: str) -> list[str]:
    """k=v,k2=[a=1,b=2]: commas inside [] belong to the value."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if current:
        parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def parse_add_config(text: Optional[str]) -> dict[str, str]:
    found = {}
    for item in split_config(text or ""):
        if "=" not in item:
            raise UsageError(f"Invalid entity config: all configs to be added must be in the format "
                             f"\"key=val\", got {item!r}")
        key, value = item.split("=", 1)
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        found[key.strip()] = value
    return found


def parse_scram(mechanism: str, text: str) -> tuple[int, str]:
    """iterations=8192,password=secret (or just the password) -> (iterations, password)."""
    fields = {}
    for item in text.split(","):
        if "=" in item:
            key, value = item.split("=", 1)
            fields[key.strip()] = value
    if "password" not in fields:
        if "=" in text:
            raise UsageError(f"{mechanism}: a password is required ([iterations=N,]password=SECRET)")
        fields["password"] = text
    try:
        iterations = int(fields.get("iterations", DEFAULT_SCRAM_ITERATIONS))
    except ValueError:
        raise UsageError(f"{mechanism}: iterations must be an integer") from None
    return iterations, fields["password"]


# ---- requests ------------------------------------------------------------------------------------------------

def describe_resource(client: AdminClient, resource_type: int, name: str):
    conn = client.bootstrap
    resource_cls = nested(request_schema(DESCRIBE_CONFIGS, conn.version_for(DESCRIBE_CONFIGS)),
                          "DescribeConfigsResource")
    answer = conn.request(DESCRIBE_CONFIGS, include_synonyms=False, include_documentation=False,
                          resources=(build(resource_cls, resource_type=resource_type, resource_name=name,
                                           configuration_keys=None),))
    result = answer.results[0]
    return Outcome(result.error_code, result.error_message), list(result.configs)


def alter_resource(client: AdminClient, resource_type: int, name: str, ops) -> Outcome:
    conn = client.bootstrap
    schema = request_schema(INCREMENTAL_ALTER_CONFIGS, conn.version_for(INCREMENTAL_ALTER_CONFIGS))
    resource_cls, config_cls = nested(schema, "AlterConfigsResource"), nested(schema, "AlterableConfig")
    answer = conn.request(INCREMENTAL_ALTER_CONFIGS, validate_only=False, resources=(build(
        resource_cls, resource_type=resource_type, resource_name=name,
        configs=tuple(build(config_cls, name=k, config_operation=op, value=v) for k, op, v in ops)),))
    result = answer.responses[0]
    return Outcome(result.error_code, result.error_message)


def _wire_entity(entities) -> list[tuple[str, Optional[str]]]:
    return [("user" if t == "users" else "client-id", name) for t, name in entities]


def describe_quotas(client: AdminClient, entities) -> list[tuple[list, dict]]:
    """[([(wire type, name or None)], {key: value})] matching the entities exactly (strict)."""
    conn = client.bootstrap
    component_cls = nested(request_schema(DESCRIBE_CLIENT_QUOTAS, conn.version_for(DESCRIBE_CLIENT_QUOTAS)),
                           "ComponentData")
    components = []
    for entity_type, name in _wire_entity(entities):
        if name == "unset":
            components.append(build(component_cls, entity_type=entity_type, match_type=2, match=None))
        elif name is DEFAULT:
            components.append(build(component_cls, entity_type=entity_type, match_type=1, match=None))
        else:
            components.append(build(component_cls, entity_type=entity_type, match_type=0, match=name))
    answer = conn.request(DESCRIBE_CLIENT_QUOTAS, components=tuple(components), strict=True)
    if answer.error_code != ErrorCode.none:
        raise AdminError(Outcome(answer.error_code, answer.error_message).text())
    return [([(e.entity_type, e.entity_name) for e in entry.entity], {v.key: v.value for v in entry.values})
            for entry in answer.entries or ()]


def alter_quotas(client: AdminClient, entities, sets: dict[str, float], removes: list[str]) -> Outcome:
    conn = client.bootstrap
    schema = request_schema(ALTER_CLIENT_QUOTAS, conn.version_for(ALTER_CLIENT_QUOTAS))
    entry_cls, entity_cls, op_cls = nested(schema, "EntryData"), nested(schema, "EntityData"), nested(schema, "OpData")
    ops = [build(op_cls, key=k, value=float(v), remove=False) for k, v in sets.items()]
    ops += [build(op_cls, key=k, value=0.0, remove=True) for k in removes]
    answer = conn.request(ALTER_CLIENT_QUOTAS, validate_only=False, entries=(build(
        entry_cls, entity=tuple(build(entity_cls, entity_type=t, entity_name=n) for t, n in _wire_entity(entities)),
        ops=tuple(ops)),))
    entry = answer.entries[0]
    return Outcome(entry.error_code, entry.error_message)


def describe_scram(client: AdminClient, users: Optional[list[str]]) -> dict[str, list[tuple[str, int]]]:
    conn = client.bootstrap
    user_cls = nested(request_schema(DESCRIBE_USER_SCRAM_CREDENTIALS, 0), "UserName")
    answer = conn.request(DESCRIBE_USER_SCRAM_CREDENTIALS,
                          users=None if users is None else tuple(build(user_cls, name=u) for u in users))
    out = {}
    for result in answer.results:
        if result.error_code == ErrorCode.none:
            out[result.user] = [(SCRAM_NAMES.get(int(c.mechanism), str(c.mechanism)), int(c.iterations))
                                for c in result.credential_infos]
    return out


def alter_scram(client: AdminClient, user: str, upserts: dict[str, tuple[int, str]], deletes: list[str]) -> Outcome:
    conn = client.bootstrap
    schema = request_schema(ALTER_USER_SCRAM_CREDENTIALS, 0)
    upsert_cls, delete_cls = nested(schema, "ScramCredentialUpsertion"), nested(schema, "ScramCredentialDeletion")
    upsertions = []
    for mechanism, (iterations, password) in upserts.items():
        kind, algorithm = SCRAM_TYPES[mechanism]
        salt = os.urandom(32)
        upsertions.append(build(upsert_cls, name=user, mechanism=kind, iterations=iterations, salt=salt,
                                salted_password=hashlib.pbkdf2_hmac(algorithm, password.encode(), salt, iterations)))
    deletions = [build(delete_cls, name=user, mechanism=SCRAM_TYPES[m][0]) for m in deletes]
    answer = conn.request(ALTER_USER_SCRAM_CREDENTIALS, deletions=tuple(deletions), upsertions=tuple(upsertions))
    for result in answer.results:
        if result.error_code != ErrorCode.none:
            return Outcome(result.error_code, result.error_message)
    return Outcome()


# ---- commands --------------------------------------------------------------------------------------------

def _entity_text(entities) -> str:
    parts = []
    for entity_type, name in entities:
        label = {"users": "user-principal", "clients": "client-id"}[entity_type]
        parts.append(f"the default {label}" if name is DEFAULT else f"{label} '{name}'")
    return ", ".join(parts)


def _number(value: float) -> str:
    return repr(float(value))


def describe(client: AdminClient, entities, args, out) -> int:
    entity_type, name = entities[0]
    if entity_type in ("topics", "brokers"):
        if entity_type == "topics" and name in ("unset", DEFAULT):
            if name is DEFAULT:
                raise UsageError("--entity-default is not valid with --entity-type topics")
            names = sorted(client.metadata().topics)
        elif entity_type == "brokers" and name == "unset":
            names = [str(b) for b in sorted(client.metadata().brokers)]
        else:
            names = ["" if name is DEFAULT else name]
        resource_type = RESOURCE_TOPIC if entity_type == "topics" else RESOURCE_BROKER
        status = EXIT_OK
        for resource in names:
            outcome, configs = describe_resource(client, resource_type, resource)
            if not outcome.ok:
                print(f"Error describing {entity_type[:-1]} {resource}: {outcome.text()}", file=sys.stderr)
                status = EXIT_FAILED
                continue
            wanted = {1} if resource_type == RESOURCE_TOPIC else ({3} if resource == "" else {2})
            shown = [c for c in configs if args.all or int(getattr(c, "config_source", -1)) in wanted]
            scope = "All" if args.all else "Dynamic"
            if resource == "":
                print(f"{'All' if args.all else 'Default'} configs for brokers in the cluster are:", file=out)
            else:
                print(f"{scope} configs for {entity_type[:-1]} {resource} are:", file=out)
            for c in sorted(shown, key=lambda c: c.name):
                # Kafka's tool prints null for secrets; a key we know to be one is hidden even
                # if a broker sent its value.
                hidden = c.is_sensitive or (resource_type == RESOURCE_BROKER and is_sensitive_broker_key(c.name))
                value = "null" if hidden else c.value
                source = SOURCE_NAMES.get(int(getattr(c, "config_source", -1)), "UNKNOWN")
                print(f"  {c.name}={value} sensitive={str(bool(c.is_sensitive)).lower()} "
                      f"synonyms={{{source}:{c.name}={value}}}", file=out)
        return status
    for found_entity, values in describe_quotas(client, entities):
        described = [("users" if t == "user" else "clients", DEFAULT if n is None else n) for t, n in found_entity]
        print(f"Quota configs for {_entity_text(described)} are "
              + ", ".join(f"{k}={_number(v)}" for k, v in sorted(values.items())), file=out)
    if entity_type == "users" and len(entities) == 1 and name is not DEFAULT:
        credentials = describe_scram(client, None if name == "unset" else [name])
        for user, infos in sorted(credentials.items()):
            print(f"SCRAM credential configs for user-principal '{user}' are "
                  + ", ".join(f"{m}=iterations={i}" for m, i in infos), file=out)
    return EXIT_OK


def alter(client: AdminClient, entities, args, out) -> int:
    adds = parse_add_config(args.add_config)
    deletes = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    if not adds and not deletes:
        raise UsageError("--alter needs --add-config and/or --delete-config")
    entity_type, name = entities[0]
    if any(n == "unset" for _, n in entities):
        raise UsageError("--entity-name or --entity-default must be specified with --alter")
    if entity_type in ("topics", "brokers"):
        if entity_type == "topics" and name is DEFAULT:
            raise UsageError("--entity-default is not valid with --entity-type topics")
        resource = "" if name is DEFAULT else name
        ops = [(k, OP_SET, v) for k, v in adds.items()] + [(k, OP_DELETE, None) for k in deletes]
        outcome = alter_resource(client, RESOURCE_TOPIC if entity_type == "topics" else RESOURCE_BROKER,
                                 resource, ops)
        if not outcome.ok:
            print(f"Error while executing config command: {outcome.text()}", file=sys.stderr)
            return EXIT_FAILED
        what = "default broker" if name is DEFAULT else f"{entity_type[:-1]} {name}"
        print(f"Completed updating config for {what}.", file=out)
        return EXIT_OK
    scram_allowed = entity_type == "users" and len(entities) == 1
    invalid = [k for k in [*adds, *deletes] if k not in QUOTA_KEYS and not (scram_allowed and k in SCRAM_TYPES)]
    if invalid:
        raise UsageError(f"Invalid config(s): {','.join(invalid)}")
    quota_sets, quota_removes = {}, [k for k in deletes if k in QUOTA_KEYS]
    for key, value in adds.items():
        if key in QUOTA_KEYS:
            try:
                quota_sets[key] = float(value)
            except ValueError:
                raise UsageError(f"{key}: {value!r} is not a number") from None
    scram_upserts = {k: parse_scram(k, v) for k, v in adds.items() if k in SCRAM_TYPES}
    scram_deletes = [k for k in deletes if k in SCRAM_TYPES]
    if (scram_upserts or scram_deletes) and name is DEFAULT:
        raise UsageError("SCRAM credentials need a user name, not --entity-default")
    if scram_upserts or scram_deletes:
        outcome = alter_scram(client, name, scram_upserts, scram_deletes)
        if not outcome.ok:
            print(f"Error while executing config command: {outcome.text()}", file=sys.stderr)
            return EXIT_FAILED
    if quota_sets or quota_removes:
        outcome = alter_quotas(client, entities, quota_sets, quota_removes)
        if not outcome.ok:
            print(f"Error while executing config command: {outcome.text()}", file=sys.stderr)
            return EXIT_FAILED
    names = ", ".join(f"{'user' if t == 'users' else 'client'} "
                      f"{'<default>' if n is DEFAULT else n}" for t, n in entities)
    print(f"Completed updating config for {names}.", file=out)
    return EXIT_OK


def add_parser(sub) -> None:
    """Register `configs` under the raykafka command's subparsers."""
    p = sub.add_parser("configs", help="describe or alter topic/broker configs, client quotas and SCRAM "
                                       "credentials (kafka-configs.sh)",
                       description="Exit status: 0 done, 1 the broker refused or could not be reached, "
                                   "2 usage error.")
    p.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, help="HOST:PORT[,HOST:PORT...]")
    p.add_argument("--command-config", metavar="FILE", help="client properties (security.protocol, sasl.*, ssl.*)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each answer")
    p.add_argument("--describe", action="store_true", help="list the configs of the entity")
    p.add_argument("--alter", action="store_true", help="change the configs of the entity")
    p.add_argument("--all", action="store_true", help="with --describe of topics/brokers: every config")
    p.add_argument("--add-config", metavar="K=V,...", help="configs to set: k1=v1,k2=[v1,v2],...")
    p.add_argument("--delete-config", metavar="K,...", help="configs to remove")
    p.add_argument("--entity-type", action=_Entity, const="type", dest="entity_items", metavar="TYPE",
                   help="topics, brokers, users or clients")
    p.add_argument("--entity-name", action=_Entity, const="name", dest="entity_items", metavar="NAME",
                   help="the topic, broker id, user or client id")
    p.add_argument("--entity-default", action=_Entity, const="default", nargs=0, dest="entity_items",
                   help="the default broker, user or client id")
    for option, entity_type in (("--topic", "topics"), ("--broker", "brokers"), ("--user", "users"),
                                ("--client", "clients")):
        p.add_argument(option, action=_Entity, const=(entity_type, False), dest="entity_items", metavar="NAME",
                       help=f"same as --entity-type {entity_type} --entity-name NAME")
    for option, entity_type in (("--broker-defaults", "brokers"), ("--user-defaults", "users"),
                                ("--client-defaults", "clients")):
        p.add_argument(option, action=_Entity, const=(entity_type, True), nargs=0, dest="entity_items",
                       help=f"same as --entity-type {entity_type} --entity-default")
    p.add_argument("--log-level", default="WARNING", help=argparse.SUPPRESS)
    p.set_defaults(run_admin_command=run)


def run(args, out=None) -> int:
    out = out or sys.stdout
    try:
        if args.describe == args.alter:
            raise UsageError("exactly one of --describe or --alter must be specified")
        entities = entities_of(getattr(args, "entity_items", None))
        if args.describe and (args.add_config or args.delete_config):
            raise UsageError("--add-config and --delete-config go with --alter")
        security = load_security(args.command_config)
    except (UsageError, SecurityConfigError) as exc:
        print(f"raykafka configs: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with AdminClient(args.bootstrap_server, args.timeout, client_id="raykafka-configs",
                         security=security) as client:
            return (describe if args.describe else alter)(client, entities, args, out)
    except UsageError as exc:
        print(f"raykafka configs: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (AdminError, OSError) as exc:
        print(f"raykafka configs: {exc}", file=sys.stderr)
        return EXIT_FAILED
