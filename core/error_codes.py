"""Kafka error codes (org.apache.kafka.common.protocol.Errors) that replica
actor processes answer with, as plain ints.

Why not kio's ErrorCode here: every partition replica is its own process,
and importing kio's schema types there pulls in kio's type machinery — and,
where hypothesis is installed, hypothesis (about 8 MiB per process, measured
as the private memory of a replica actor). The edge, which needs kio anyway,
keeps using kio.schema.errors.ErrorCode. The purgatory answers with these too:
a replica looks its actor up (ray.get_actor), which imports its module into
the replica's process. tests/unit/test_error_codes.py checks
every value here against kio, so the two cannot drift.
"""

from storage.errors import OFFSET_OUT_OF_RANGE  # noqa: F401  (one definition for both layers)

INVALID_REQUEST = 42
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
REQUEST_TIMED_OUT = 7
NOT_LEADER_OR_FOLLOWER = 6
STALE_CONTROLLER_EPOCH = 11
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
