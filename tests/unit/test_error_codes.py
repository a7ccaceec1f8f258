"""core.error_codes.ErrorCode, the one set of Kafka error codes (replica
processes do not import kio), must equal Kafka's, as kio generates them from
Kafka's JSON: every member by name and value, none missing."""
from kio.schema.errors import ErrorCode as KioErrorCode

from core.error_codes import ErrorCode


def test_every_error_code_equals_kafkas():
    ours = {e.name: (int(e), e.retriable) for e in ErrorCode}
    kafkas = {e.name: (int(e), e.retriable) for e in KioErrorCode}
    assert ours == kafkas
    for e in KioErrorCode:
        assert ErrorCode[e.name] == e and hash(ErrorCode[e.name]) == hash(e)


def test_kio_serializes_our_error_codes():
    """Responses built with our members encode as with kio's own."""
    import io

    from kio.schema.delete_topics.v6.response import DeletableTopicResult, DeleteTopicsResponse
    from kio.schema.find_coordinator.v4.response import Coordinator, FindCoordinatorResponse
    from kio.schema.metadata.v12.response import MetadataResponse, MetadataResponsePartition, MetadataResponseTopic
    from kio.serial import entity_writer

    from net.schema_build import ZERO_THROTTLE, build

    def encode(errors):
        part = build(MetadataResponsePartition, error_code=errors.not_leader_or_follower, partition_index=0,
                     leader_id=-1, leader_epoch=-1, replica_nodes=(), isr_nodes=(), offline_replicas=())
        topic = build(MetadataResponseTopic, error_code=errors.none, name="t", topic_id=None, is_internal=False,
                      partitions=(part,), topic_authorized_operations=-2147483648)
        responses = [
            build(MetadataResponse, throttle_time=ZERO_THROTTLE, brokers=(), cluster_id=None, controller_id=-1,
                  topics=(topic,)),
            build(FindCoordinatorResponse, throttle_time=ZERO_THROTTLE, coordinators=(build(
                Coordinator, key="g", node_id=-1, host="", port=-1,
                error_code=errors.coordinator_not_available, error_message=None),)),
            build(DeleteTopicsResponse, throttle_time=ZERO_THROTTLE, responses=(build(
                DeletableTopicResult, name="t", topic_id=None, error_code=errors.topic_deletion_disabled,
                error_message=None),)),
        ]
        out = []
        for response in responses:
            buffer = io.BytesIO()
            entity_writer(type(response))(buffer, response)
            out.append(buffer.getvalue())
        return out

    assert encode(ErrorCode) == encode(KioErrorCode)


def test_replica_modules_do_not_import_kio():
    """A replica process imports its own module and, when it looks the node's
    purgatory up (ray.get_actor loads the actor's class), the purgatory's."""
    import subprocess
    import sys
    code = ("import sys; import actors.partition_leader, actors.purgatory, core.error_codes; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('kio', 'hypothesis', 'kazoo')); "
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
