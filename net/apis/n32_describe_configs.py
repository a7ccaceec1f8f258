"""DescribeConfigs (32): topic configs with their sources and synonyms (topic
override > static broker config > default), and the broker's static configs.
A sensitive config (Kafka's isSensitive: a password, or a key of unknown
type) answers null for its value and for every synonym's value, to everyone."""
from core.controller_messages import ConfigResource, DescribedConfigs
from core.error_codes import ErrorCode

from net.actor_calls import ActorCallFailed
from net import authorization
from net.authorization import Operation
from net.registry import api
from net.schema_build import ZERO_THROTTLE, build, nested, response_schema_for

TOPIC, BROKER = 2, 4
# Not a config: this broker's replica pool counts (issue 30), read-only, only when asked for by name
# (raykafka topics --describe does), so ordinary listings are Kafka's.
POOL_STATS_KEY = "raykafka.replica.pool.stats"


def _pool_stats_entry(edge, resource_name: str, entry_cls) -> tuple:
    pool = getattr(edge.replicas, "pool", None)
    if pool is None or resource_name not in ("", str(edge.broker_id)):
        return ()
    s = pool.stats()
    if s is None:  # a sibling edge before its first copy of the primary's counts
        return ()
    value = (f"hosted={s.hosted},live={s.live},hibernated={s.hibernated},live_max={s.live_max},"
             f"wakeups={s.wakeups},hibernations={s.hibernations},wake_p50_ms={s.wake_p50_ms:.0f},"
             f"wake_p99_ms={s.wake_p99_ms:.0f},adopted={s.adopted},"
             f"cold_starts={s.cold_starts},over_limit={s.over_limit},prestarts={s.prestarts}")
    return (build(entry_cls, name=POOL_STATS_KEY, value=value, read_only=True, config_source=5, is_sensitive=False,
                  is_default=False, synonyms=(), config_type=2, documentation=None),)


@api(32, 1, 4, tests=("tests/integration/test_log_management.py::test_describe_and_alter_configs_confluent",
                      "tests/integration/test_log_management.py::test_describe_and_alter_configs_kafka_python"))
async def handle_describe_configs(ctx, request):
    edge = ctx.edge
    schema = response_schema_for(request)
    result_cls = nested(schema, "DescribeConfigsResult")
    entry_cls = nested(schema, "DescribeConfigsResourceResult")
    synonym_cls = nested(schema, "DescribeConfigsSynonym")
    may = await authorization.checker(ctx)
    denials = [authorization.config_denial(may, Operation.DESCRIBE_CONFIGS, r.resource_type, r.resource_name)
               for r in request.resources]
    resources = []
    for r, denial in zip(request.resources, denials):
        name = str(edge.broker_id) if r.resource_type == BROKER and r.resource_name == "" else r.resource_name
        if denial is None:
            resources.append(ConfigResource(r.resource_type, name))
    try:
        described = await edge.controller_call("describe_configs", resources) if resources else []
    except ActorCallFailed as exc:
        described = [DescribedConfigs(r.name, exc.error, str(exc)) for r in resources]
    answered = iter(described)
    described = [next(answered) if denial is None else
                 DescribedConfigs(r.resource_name, ErrorCode(int(denial)), "Authorization failed.")
                 for r, denial in zip(request.resources, denials)]
    with_synonyms = getattr(request, "include_synonyms", False)
    with_docs = getattr(request, "include_documentation", False)
    results = []
    for r, d in zip(request.resources, described):
        wanted = set(r.configuration_keys) if r.configuration_keys else None
        entries = tuple(
            build(entry_cls, name=e["name"], value=None if e["sensitive"] else e["value"], read_only=e["read_only"],
                  config_source=e["source"], is_sensitive=e["sensitive"],
                  is_default=e["source"] == 5,
                  synonyms=tuple(build(synonym_cls, name=s["name"], value=None if e["sensitive"] else s["value"],
                                       source=s["source"])
                                 for s in e["synonyms"]) if with_synonyms else (),
                  config_type=e["type"], documentation=e["doc"] if with_docs else None)
            for e in d.entries if wanted is None or e["name"] in wanted)
        if wanted and POOL_STATS_KEY in wanted and r.resource_type == BROKER and d.error == ErrorCode.none:
            entries += _pool_stats_entry(edge, r.resource_name, entry_cls)
        results.append(build(result_cls, error_code=d.error, error_message=d.message,
                             resource_type=r.resource_type, resource_name=r.resource_name, configs=entries))
    return build(schema, throttle_time=ZERO_THROTTLE, results=tuple(results))
