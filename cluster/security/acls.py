"""Kafka's ACL model (org.apache.kafka.common.acl / .resource): resource and
pattern types, operations, permission types with their wire codes, bindings,
and the filters DescribeAcls / DeleteAcls carry, with Kafka's matching rules.
Plain values, no I/O."""
from __future__ import annotations

import dataclasses
import enum

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
CLUSTER_NAME = "kafka-cluster"


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


class _Named(enum.IntEnum):
    @property
    def pascal(self) -> str:
        """Kafka's SecurityUtils name: TRANSACTIONAL_ID -> TransactionalId."""
        return _pascal(self.name)

    @classmethod
    def parse(cls, text: str):
        """Kafka's fromString: case-insensitive, '_' optional (Read, READ, AlterConfigs, alter_configs)."""
        wanted = text.strip().replace("_", "").replace("-", "").lower()
        for member in cls:
            if member.name.replace("_", "").lower() == wanted:
                return member
        raise ValueError(f"unknown {cls.__name__} {text!r}")


class ResourceType(_Named):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Named):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(_Named):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class PermissionType(_Named):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# Operations an ACL may name per resource type (Kafka's AclEntry.supportedOperations); ALL always.
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[Operation]] = {
    ResourceType.TOPIC: frozenset({Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE,
                                   Operation.DELETE, Operation.ALTER, Operation.DESCRIBE_CONFIGS,
                                   Operation.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({Operation.READ, Operation.DESCRIBE, Operation.DELETE,
                                   Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                                     Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER,
                                     Operation.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({Operation.DESCRIBE, Operation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({Operation.DESCRIBE}),
    ResourceType.USER: frozenset({Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS}),
}


@dataclasses.dataclass(frozen=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType


@dataclasses.dataclass(frozen=True, order=True)
class AccessControlEntry:
    principal: str  # "User:alice"
    host: str
    operation: Operation
    permission_type: PermissionType

    def to_json(self) -> dict:
        """One entry of Kafka's /kafka-acl znode JSON (AclEntry.toMap)."""
        return {"principal": self.principal, "permissionType": self.permission_type.pascal,
                "operation": self.operation.pascal, "host": self.host}

    @classmethod
    def from_json(cls, item: dict) -> "AccessControlEntry":
        return cls(item["principal"], item["host"], Operation.parse(item["operation"]),
                   PermissionType.parse(item["permissionType"]))


@dataclasses.dataclass(frozen=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


def validate_binding(binding: AclBinding) -> str | None:
    """Why Kafka refuses to create this ACL (INVALID_REQUEST), or None."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        return "Invalid resource type"
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid pattern type {pattern.pattern_type.name}"
    if pattern.resource_type == ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not pattern.name:
        return "Invalid empty resource name"
    if "/" in pattern.name or pattern.name in (".", ".."):
        # Kafka's ZooKeeper layout keeps each resource's ACLs in the znode
        # /kafka-acl/<type>/<name>, unencoded: a '/' would make a nested znode that
        # the loader (the type's direct children) never reads, and the ACL, DENY
        # included, would vanish at the next load. So such an ACL is refused.
        return f"Resource name {pattern.name!r} cannot be stored: ACL resource names may not contain '/'"
    if entry.operation in (Operation.ANY, Operation.UNKNOWN):
        return "Invalid operation"
    if entry.permission_type not in (PermissionType.ALLOW, PermissionType.DENY):
        return "Invalid permission type"
    if ":" not in entry.principal:
        return f"Invalid principal {entry.principal!r}: expected Type:name"
    if pattern.pattern_type == PatternType.PREFIXED and pattern.name == WILDCARD_RESOURCE:
        return "Cannot add a PREFIXED ACL for the wildcard resource"
    if entry.operation != Operation.ALL and entry.operation not in SUPPORTED_OPERATIONS[pattern.resource_type]:
        supported = ", ".join(sorted(o.pascal for o in SUPPORTED_OPERATIONS[pattern.resource_type]))
        return f"ResourceType {pattern.resource_type.pascal} only supports operations {supported}"
    return None


@dataclasses.dataclass(frozen=True)
class ResourcePatternFilter:
    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    def matches(self, pattern: ResourcePattern) -> bool:
        """Kafka's ResourcePatternFilter.matches: MATCH selects the patterns that
        would apply to a resource of that name (itself, '*', prefixes of it)."""
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type == PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        if pattern.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        return False

    def invalid(self) -> str | None:
        if self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN:
            return "Filter contains UNKNOWN elements"
        return None


@dataclasses.dataclass(frozen=True)
class AccessControlEntryFilter:
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission_type: PermissionType = PermissionType.ANY

    def matches(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and self.operation in (Operation.ANY, entry.operation)
                and self.permission_type in (PermissionType.ANY, entry.permission_type))

    def invalid(self) -> str | None:
        if self.operation == Operation.UNKNOWN or self.permission_type == PermissionType.UNKNOWN:
            return "Filter contains UNKNOWN elements"
        return None


@dataclasses.dataclass(frozen=True)
class AclBindingFilter:
    pattern: ResourcePatternFilter = ResourcePatternFilter()
    entry: AccessControlEntryFilter = AccessControlEntryFilter()

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)

    def invalid(self) -> str | None:
        return self.pattern.invalid() or self.entry.invalid()


ANY_ACL = AclBindingFilter()
