"""Kafka's ZooKeeper-mode AclAuthorizer (kafka.security.authorizer.AclAuthorizer):

- `AclAuthorizer`: the decision over a cache of ACLs, as Kafka makes it: super
  users pass; a resource without any ACL (literal, `*`, or a prefix of its
  name) is allowed only with allow.everyone.if.no.acl.found; otherwise a
  matching DENY wins, and an ALLOW must match (DESCRIBE is implied by READ,
  WRITE, DELETE, ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS; ALL covers every
  operation). Principal `User:*` and host `*` match everyone.
- `ZkAclStore`: the ACLs in Kafka's znodes (/kafka-acl/<Type>/<name>,
  /kafka-acl-extended/prefixed/<Type>/<name>, Kafka's JSON) with Kafka's
  change notifications (/kafka-acl-changes/acl_changes_<seq> holding
  "TOPIC:name", /kafka-acl-extended-changes/acl_changes_<seq> holding the
  ExtendedAclChangeEvent JSON), so a change made through any broker (or
  Kafka's own tools) reaches every edge's cache within a ZooKeeper round trip.
  Its methods block: call them from a thread (the edge uses an executor);
  the change watch runs on a thread of its own.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from typing import Iterable

from cluster.security.acls import (ANY_ACL, WILDCARD_HOST, WILDCARD_PRINCIPAL, WILDCARD_RESOURCE,
                                   AccessControlEntry, AclBinding, AclBindingFilter, Operation, PatternType,
                                   PermissionType, ResourcePattern, ResourceType, validate_binding)
from core.error_codes import ErrorCode
from metadata.kafka_zk import BadVersionError, KafkaZkClient, ZkNodeExistsError, ZkNoNodeError, ZkNotEmptyError

log = logging.getLogger("raykafka.authorizer")

AUTHORIZER_CLASS_NAMES = ("kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer")

# Operations whose ALLOW also allows the key (Kafka's AclAuthorizer.authorizeAction).
IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE,
                                   Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}

Entries = frozenset  # frozenset[AccessControlEntry]


def parse_super_users(value: str | None) -> frozenset[str]:
    """super.users: semicolon-separated principals ("User:admin;User:ops")."""
    return frozenset(part.strip() for part in (value or "").split(";") if part.strip())


def _applies(entry: AccessControlEntry, principal: str, host: str, operations: Iterable[Operation],
             permission: PermissionType) -> bool:
    return (entry.permission_type == permission
            and entry.principal in (principal, WILDCARD_PRINCIPAL)
            and entry.host in (host, WILDCARD_HOST)
            and (entry.operation == Operation.ALL or entry.operation in operations))


class AclAuthorizer:
    """Decisions over an in-memory copy of the ACLs. The copy is replaced
    whole on every change (copy on write), so a decision on the event loop
    reads one consistent snapshot while a store thread updates it."""

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False):
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        # (resource type, LITERAL|PREFIXED) -> {name: entries}
        self._acls: dict[tuple[ResourceType, PatternType], dict[str, Entries]] = {}
        # Writers (the change watch, CreateAcls/DeleteAcls in an executor)
        # copy and replace under it, so no update is lost; readers take none.
        self._write_lock = threading.Lock()

    # ---- cache ----------------------------------------------------------------------------
    def set_acls(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        entries = frozenset(entries)
        key = (pattern.resource_type, pattern.pattern_type)
        with self._write_lock:
            names = dict(self._acls.get(key, {}))
            if entries:
                names[pattern.name] = entries
            else:
                names.pop(pattern.name, None)
            acls = dict(self._acls)
            acls[key] = names
            self._acls = acls

    def replace_all(self, acls: dict[ResourcePattern, Iterable[AccessControlEntry]]) -> None:
        fresh: dict[tuple[ResourceType, PatternType], dict[str, Entries]] = {}
        for pattern, entries in acls.items():
            if entries:
                fresh.setdefault((pattern.resource_type, pattern.pattern_type), {})[pattern.name] = frozenset(entries)
        with self._write_lock:
            self._acls = fresh

    def acls_of(self, pattern: ResourcePattern) -> Entries:
        return self._acls.get((pattern.resource_type, pattern.pattern_type), {}).get(pattern.name, frozenset())

    def bindings(self, binding_filter: AclBindingFilter = ANY_ACL) -> list[AclBinding]:
        found = []
        for (resource_type, pattern_type), names in self._acls.items():
            for name, entries in names.items():
                pattern = ResourcePattern(resource_type, name, pattern_type)
                if not binding_filter.pattern.matches(pattern):
                    continue
                found.extend(AclBinding(pattern, e) for e in entries if binding_filter.entry.matches(e))
        return sorted(found)

    # ---- decisions ------------------------------------------------------------------------
    def _matching(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        acls = self._acls
        literal = acls.get((resource_type, PatternType.LITERAL), {})
        found = [*literal.get(name, ()), *literal.get(WILDCARD_RESOURCE, ())] if name != WILDCARD_RESOURCE \
            else [*literal.get(name, ())]
        prefixed = acls.get((resource_type, PatternType.PREFIXED))
        if prefixed:
            for end in range(1, len(name) + 1):
                found.extend(prefixed.get(name[:end], ()))
        return found

    def authorize(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                  name: str) -> bool:
        if principal in self.super_users:
            return True
        entries = self._matching(resource_type, name)
        if not entries:
            return self.allow_everyone_if_no_acl_found
        if any(_applies(e, principal, host, (operation,), PermissionType.DENY) for e in entries):
            return False
        allowing = IMPLIED_BY.get(operation, (operation,))
        return any(_applies(e, principal, host, allowing, PermissionType.ALLOW) for e in entries)

    def _names(self, principal: str, host: str, operation: Operation, permission: PermissionType,
               resource_type: ResourceType, pattern_type: PatternType) -> set[str]:
        return {name for name, entries in self._acls.get((resource_type, pattern_type), {}).items()
                if any(_applies(e, principal, host, (operation,), permission) for e in entries)}

    def authorize_by_resource_type(self, principal: str, host: str, operation: Operation,
                                   resource_type: ResourceType) -> bool:
        """Whether the principal may do `operation` on at least one resource of
        the type (Kafka's authorizeByResourceType: an ALLOW on some literal
        or prefix that no DENY covers; no implied operations)."""
        if principal in self.super_users:
            return True
        deny_literals = self._names(principal, host, operation, PermissionType.DENY, resource_type,
                                    PatternType.LITERAL)
        if WILDCARD_RESOURCE in deny_literals:
            return False
        if self.allow_everyone_if_no_acl_found:
            return True
        deny_prefixes = self._names(principal, host, operation, PermissionType.DENY, resource_type,
                                    PatternType.PREFIXED)
        allow_literals = self._names(principal, host, operation, PermissionType.ALLOW, resource_type,
                                     PatternType.LITERAL)
        allow_prefixes = self._names(principal, host, operation, PermissionType.ALLOW, resource_type,
                                     PatternType.PREFIXED)

        def dominant_prefixed_deny(name: str) -> bool:
            return any(name[:end] in deny_prefixes for end in range(1, len(name) + 1))

        if any(not dominant_prefixed_deny(p) for p in allow_prefixes):
            return True
        return any(name == WILDCARD_RESOURCE or (name not in deny_literals and not dominant_prefixed_deny(name))
                   for name in allow_literals)


# ---- ZooKeeper layout (Kafka's ZkData: ZkAclStore, ZkAclChangeStore) ----------------------
LITERAL_ACL_PATH = "/kafka-acl"
EXTENDED_ACL_PATH = "/kafka-acl-extended"
LITERAL_CHANGES_PATH = "/kafka-acl-changes"
EXTENDED_CHANGES_PATH = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
# Kafka's ZkNodeChangeNotificationListener removes notifications older than this.
CHANGE_EXPIRATION_S = 15 * 60
STORED_RESOURCE_TYPES = tuple(t for t in ResourceType if t not in (ResourceType.UNKNOWN, ResourceType.ANY))


def acl_root(pattern_type: PatternType) -> str:
    if pattern_type == PatternType.LITERAL:
        return LITERAL_ACL_PATH
    return f"{EXTENDED_ACL_PATH}/{pattern_type.name.lower()}"


# Bounds: versioned-write retries against concurrent writers (each attempt
# re-reads), and the znodes one type's load walks.
MAX_UPDATE_ATTEMPTS = 100
MAX_ACL_ZNODES_PER_TYPE = 1_000_000


def acl_path(pattern: ResourcePattern) -> str:
    return f"{acl_root(pattern.pattern_type)}/{pattern.resource_type.pascal}/{pattern.name}"


def encode_acls(entries: Iterable[AccessControlEntry]) -> bytes:
    return json.dumps({"version": 1, "acls": [e.to_json() for e in sorted(entries)]},
                      separators=(",", ":")).encode()


def decode_acls(data: bytes | None) -> frozenset[AccessControlEntry]:
    if not data:
        return frozenset()
    body = json.loads(data)
    if body.get("version") != 1:
        raise ValueError(f"unsupported ACL znode version {body.get('version')}")
    return frozenset(AccessControlEntry.from_json(item) for item in body.get("acls", ()))


def encode_change(pattern: ResourcePattern) -> tuple[str, bytes]:
    """(change path, notification data) announcing a changed resource, as Kafka writes them."""
    if pattern.pattern_type == PatternType.LITERAL:
        return LITERAL_CHANGES_PATH, f"{pattern.resource_type.name}:{pattern.name}".encode()
    return EXTENDED_CHANGES_PATH, json.dumps(
        {"version": 1, "resourceType": pattern.resource_type.name, "name": pattern.name,
         "patternType": pattern.pattern_type.name}).encode()


def decode_change(change_path: str, data: bytes) -> ResourcePattern:
    text = data.decode()
    if change_path == LITERAL_CHANGES_PATH:
        resource_type, name = text.split(":", 1)
        return ResourcePattern(ResourceType.parse(resource_type), name, PatternType.LITERAL)
    body = json.loads(text)
    return ResourcePattern(ResourceType.parse(body["resourceType"]), body["name"],
                           PatternType.parse(body["patternType"]))


class ZkAclStore:
    """The ACLs in ZooKeeper, mirrored into an AclAuthorizer and kept current
    by Kafka's change notifications. Blocking. Reads and writes through the
    process's ZooKeeper client (its ``acls`` family), which it does not own:
    close() stops following changes and leaves the client open."""

    def __init__(self, zk: KafkaZkClient, authorizer: AclAuthorizer):
        self.zk = zk
        self.authorizer = authorizer
        self._lock = threading.Lock()  # one writer at a time in this process
        self._seen: dict[str, int] = {LITERAL_CHANGES_PATH: -1, EXTENDED_CHANGES_PATH: -1}
        self._wake = threading.Event()
        self._reload_all = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._watches: list = []

    # ---- lifecycle ------------------------------------------------------------------------
    def start(self) -> "ZkAclStore":
        acls = self.zk.acls
        # With zookeeper.set.acl the ACL znodes created here are writable by the brokers only
        # (the client carries this process's ZooKeeper credentials).
        acls.ensure_roots()
        # Notifications already present describe changes the full load below includes.
        for change_path in self._seen:
            self._seen[change_path] = max((self._seq(c) for c in acls.change_names(change_path)), default=-1)
        self.load_all()
        # After a lost session the notifications missed may have been purged: reload everything.
        self.zk.on_session_lost(self._on_session_lost)
        self.zk.on_new_session(lambda _session_id: self._wake.set())
        self._thread = threading.Thread(target=self._run, name="acl-changes", daemon=True)
        self._thread.start()
        for change_path in self._seen:
            self._watches.append(acls.watch_changes(change_path, lambda _names: self._wake.set()))
        return self

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        for watch in self._watches:
            watch.cancel()
        self._watches.clear()

    def _on_session_lost(self) -> None:
        self._reload_all = True

    @staticmethod
    def _seq(child: str) -> int:
        try:
            return int(child[len(CHANGE_PREFIX):])
        except ValueError:
            return -1

    # ---- reading --------------------------------------------------------------------------
    def _read(self, pattern: ResourcePattern) -> tuple[frozenset[AccessControlEntry], int]:
        """(entries, znode version; -1: no znode)."""
        data, version = self.zk.acls.read(acl_path(pattern))
        return decode_acls(data), version

    def load_all(self) -> None:
        """Every stored ACL. A name holding '/' (CreateAcls refuses new ones; an
        older version wrote them as nested znodes) is found by walking down, so
        an ACL stored that way, a DENY above all, is still enforced."""
        found: dict[ResourcePattern, frozenset] = {}
        for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            for resource_type in STORED_RESOURCE_TYPES:
                for name in self._stored_names(f"{acl_root(pattern_type)}/{resource_type.pascal}"):
                    pattern = ResourcePattern(resource_type, name, pattern_type)
                    entries = self._read(pattern)[0]
                    if entries:
                        found[pattern] = entries
        self.authorizer.replace_all(found)

    def _stored_names(self, type_path: str) -> list[str]:
        """The resource names under a type's znode, nested ones as 'a/b' (at most
        MAX_ACL_ZNODES_PER_TYPE, a bound on a corrupt or hostile tree)."""
        names, pending = [], [""]
        while pending and len(names) < MAX_ACL_ZNODES_PER_TYPE:
            prefix = pending.pop()
            children = self.zk.acls.children(f"{type_path}/{prefix}" if prefix else type_path)
            for child in children or ():
                name = f"{prefix}/{child}" if prefix else child
                names.append(name)
                pending.append(name)
        if pending:
            log.error("more than %d ACL znodes under %s: the rest are not loaded", MAX_ACL_ZNODES_PER_TYPE, type_path)
        return names

    def reload(self, pattern: ResourcePattern) -> None:
        self.authorizer.set_acls(pattern, self._read(pattern)[0])

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait()
            self._wake.clear()
            if self._closed:
                return
            try:
                if self._reload_all:
                    self._reload_all = False
                    self.load_all()
                self._process_changes()
            except Exception as exc:  # ZooKeeper away: the next event or reconnect retries
                log.warning("processing ACL changes failed: %s", exc)
                self._reload_all = True
                time.sleep(1)
                self._wake.set()

    def _process_changes(self) -> None:
        acls = self.zk.acls
        for change_path, seen in list(self._seen.items()):
            children = sorted((self._seq(c), c) for c in acls.change_names(change_path))
            for seq, child in children:
                if seq <= seen:
                    continue
                found = acls.change(change_path, child)
                if found is None:
                    continue
                data, created_ms = found
                try:
                    self.reload(decode_change(change_path, data))
                except ValueError as exc:
                    log.warning("ignoring ACL change %s/%s: %s", change_path, child, exc)
                self._seen[change_path] = seq
                if time.time() - created_ms / 1000 > CHANGE_EXPIRATION_S:
                    acls.delete_change(change_path, child)

    # ---- writing --------------------------------------------------------------------------
    def _update(self, pattern: ResourcePattern, change) -> frozenset[AccessControlEntry]:
        """Apply change(current entries) -> new entries with a versioned
        write (retried on a concurrent writer), announce it, refresh the cache."""
        acls = self.zk.acls
        path = acl_path(pattern)
        for _attempt in range(MAX_UPDATE_ATTEMPTS):
            current, version = self._read(pattern)
            wanted = frozenset(change(current))
            if wanted == current:
                return current
            try:
                if version < 0:
                    acls.create(path, encode_acls(wanted))
                elif wanted:
                    acls.set(path, encode_acls(wanted), version)
                else:
                    try:
                        acls.delete(path, version)
                    except ZkNotEmptyError:
                        # the znode is also the parent of a nested name's ('a' of 'a/b'):
                        # keep it, with no ACL of its own
                        acls.set(path, encode_acls(wanted), version)
                break
            except (BadVersionError, ZkNodeExistsError, ZkNoNodeError):
                continue  # a concurrent writer: read again
        else:
            raise RuntimeError(f"ACLs of {pattern} kept changing under {MAX_UPDATE_ATTEMPTS} attempts")
        change_path, data = encode_change(pattern)
        acls.add_change(change_path, CHANGE_PREFIX, data)
        self.authorizer.set_acls(pattern, wanted)
        return wanted

    def create_acls(self, bindings: list[AclBinding]) -> list[tuple[ErrorCode, str | None]]:
        """-> per binding (error code, message): Kafka's AclAuthorizer.createAcls."""
        results: list[tuple[ErrorCode, str | None]] = [(ErrorCode.none, None)] * len(bindings)
        by_pattern: dict[ResourcePattern, list[int]] = {}
        for index, binding in enumerate(bindings):
            problem = validate_binding(binding)
            if problem is not None:
                results[index] = (ErrorCode.invalid_request, f"Failed to create ACL: {problem}")
            else:
                by_pattern.setdefault(binding.pattern, []).append(index)
        with self._lock:
            for pattern, indexes in by_pattern.items():
                added = {bindings[i].entry for i in indexes}
                try:
                    self._update(pattern, lambda current: current | added)
                except Exception as exc:
                    log.warning("creating ACLs on %s failed: %s", pattern, exc)
                    for i in indexes:
                        results[i] = (ErrorCode.unknown_server_error,
                                      "The server experienced an unexpected error when processing the request.")
        return results

    def delete_acls(self, filters: list[AclBindingFilter]) -> list[tuple[ErrorCode, str | None, list[AclBinding]]]:
        """-> per filter (error, message, deleted bindings): Kafka's AclAuthorizer.deleteAcls
        (exact patterns named by a filter are read from ZooKeeper, not only the cache)."""
        results: list[tuple[ErrorCode, str | None, list[AclBinding]]] = []
        with self._lock:
            patterns = {b.pattern for b in self.authorizer.bindings()}
            for f in filters:
                p = f.pattern
                if p.resource_type not in (ResourceType.ANY, ResourceType.UNKNOWN) and p.name is not None \
                        and p.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED, PatternType.ANY):
                    kinds = (PatternType.LITERAL, PatternType.PREFIXED) if p.pattern_type == PatternType.ANY \
                        else (p.pattern_type,)
                    patterns.update(ResourcePattern(p.resource_type, p.name, k) for k in kinds)
            deleted: dict[int, list[AclBinding]] = {i: [] for i in range(len(filters))}
            for pattern in sorted(patterns):
                matching = [i for i, f in enumerate(filters) if f.invalid() is None and f.pattern.matches(pattern)]
                if not matching:
                    continue
                removed: list[AccessControlEntry] = []

                def drop(current, matching=matching, removed=removed):
                    removed.clear()
                    kept = set()
                    for entry in current:
                        if any(filters[i].entry.matches(entry) for i in matching):
                            removed.append(entry)
                        else:
                            kept.add(entry)
                    return kept

                self._update(pattern, drop)
                for entry in removed:
                    for i in matching:
                        if filters[i].entry.matches(entry):
                            deleted[i].append(AclBinding(pattern, entry))
            for i, f in enumerate(filters):
                problem = f.invalid()
                if problem is not None:
                    results.append((ErrorCode.invalid_request, problem, []))
                else:
                    results.append((ErrorCode.none, None, deleted[i]))
        return results
