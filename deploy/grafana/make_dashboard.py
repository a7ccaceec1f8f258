"""Writes deploy/grafana/raykafka.json, the Grafana dashboard for the metrics
of core/metrics.py (as Ray's endpoint shows them: ray_ prefix, _total on
counters). Run: .venv/bin/python deploy/grafana/make_dashboard.py"""
import json
from pathlib import Path

DS = {"type": "prometheus", "uid": "${datasource}"}
_panels = []
_y = 0


def row(title):
    global _y
    _panels.append({"type": "row", "title": title, "collapsed": False, "gridPos": {"h": 1, "w": 24, "x": 0, "y": _y},
                    "id": len(_panels) + 1, "panels": []})
    _y += 1


def panel(title, targets, unit="short", x=0, w=8, h=8, kind="timeseries", description=""):
    global _y
    _panels.append({
        "type": kind, "title": title, "description": description, "datasource": DS, "id": len(_panels) + 1,
        "gridPos": {"h": h, "w": w, "x": x, "y": _y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]}}
        if kind == "timeseries" else {"reduceOptions": {"calcs": ["lastNotNull"]}},
        "targets": [{"datasource": DS, "expr": expr, "legendFormat": legend, "refId": chr(65 + i)}
                    for i, (expr, legend) in enumerate(targets)],
    })
    if x + w >= 24:
        _y += h


def q(quantile, metric, request):
    return (f'histogram_quantile({quantile}, sum by (le) (rate(ray_kafka_network_requestmetrics_{metric}_bucket'
            f'{{request="{request}"}}[$__rate_interval])))')


R = "[$__rate_interval]"
row("Cluster health")
panel("Active controllers", [("sum(ray_kafka_controller_kafkacontroller_activecontrollercount)", "controllers")],
      x=0, w=4, h=4, kind="stat", description="Exactly 1 when healthy")
panel("Offline partitions", [("max(ray_kafka_controller_kafkacontroller_offlinepartitionscount)", "offline")],
      x=4, w=4, h=4, kind="stat")
panel("Under-replicated partitions", [("sum(ray_kafka_server_replicamanager_underreplicatedpartitions)", "URP")],
      x=8, w=4, h=4, kind="stat")
panel("Under min ISR", [("sum(ray_kafka_server_replicamanager_underminisrpartitioncount)", "under min ISR")],
      x=12, w=4, h=4, kind="stat")
panel("Controller epoch", [("max(ray_kafka_controller_kafkacontroller_controllerepoch)", "epoch")],
      x=16, w=4, h=4, kind="stat")
panel("Partitions / topics", [("max(ray_kafka_controller_kafkacontroller_globalpartitioncount)", "partitions"),
                              ("max(ray_kafka_controller_kafkacontroller_globaltopiccount)", "topics")],
      x=20, w=4, h=4, kind="stat")
row("Throughput")
panel("Bytes in by topic", [(f"sum by (topic) (rate(ray_kafka_server_brokertopicmetrics_bytesin_total{R}))",
                             "{{topic}}")], unit="Bps")
panel("Bytes out by topic", [(f"sum by (topic) (rate(ray_kafka_server_brokertopicmetrics_bytesout_total{R}))",
                              "{{topic}}")], unit="Bps", x=8)
panel("Messages in by topic", [(f"sum by (topic) (rate(ray_kafka_server_brokertopicmetrics_messagesin_total{R}))",
                                "{{topic}}")], unit="ops", x=16)
panel("Requests by API", [(f"sum by (request) (rate(ray_kafka_network_requestmetrics_requests_total{R}))",
                           "{{request}}")], unit="reqps")
panel("Errors by API and code", [(f"sum by (request, error) (rate(ray_kafka_network_requestmetrics_errors_total{R}))",
                                  "{{request}} {{error}}")], unit="ops", x=8)
panel("Failed produce / fetch by topic",
      [(f"sum by (topic) (rate(ray_kafka_server_brokertopicmetrics_failedproducerequests_total{R}))",
        "produce {{topic}}"),
       (f"sum by (topic) (rate(ray_kafka_server_brokertopicmetrics_failedfetchrequests_total{R}))",
        "fetch {{topic}}")], unit="ops", x=16)
row("Request latency")
for i, request in enumerate(("Produce", "Fetch", "OffsetCommit")):
    panel(f"{request}: total time p50 / p99",
          [(q(0.5, "totaltimems", request), "p50"), (q(0.99, "totaltimems", request), "p99"),
           (q(0.999, "totaltimems", request), "p99.9")], unit="ms", x=8 * i)
for i, request in enumerate(("Produce", "Fetch")):
    panel(f"{request}: p99 by phase",
          [(q(0.99, m, request), m.replace("timems", "")) for m in
           ("requestqueuetimems", "localtimems", "remotetimems", "responsequeuetimems", "responsesendtimems")],
          unit="ms", x=12 * i, w=12)
panel("Total time p99 by API",
      [(f"histogram_quantile(0.99, sum by (le, request) "
        f"(rate(ray_kafka_network_requestmetrics_totaltimems_bucket{R})))", "{{request}}")], unit="ms", w=24)
row("Replication")
panel("ISR shrinks / expands", [(f"sum(rate(ray_kafka_server_replicamanager_isrshrinks_total{R}))", "shrinks"),
                                (f"sum(rate(ray_kafka_server_replicamanager_isrexpands_total{R}))", "expands")],
      unit="ops")
panel("Leader elections", [(f"sum(rate(ray_kafka_controller_controllerstats_leaderelections_total{R}))",
                            "elections")], unit="ops", x=8)
panel("Follower lag (max per broker)", [("max by (broker) (ray_kafka_server_replicafetchermanager_maxlag)",
                                         "broker {{broker}}")], x=16)
panel("Leaders per broker", [("max by (broker) (ray_kafka_server_replicamanager_leadercount)", "broker {{broker}}")])
panel("Replicas per broker", [("max by (broker) (ray_kafka_server_replicamanager_partitioncount)",
                               "broker {{broker}}")], x=8)
panel("Under-replicated by broker", [("max by (broker) (ray_kafka_server_replicamanager_underreplicatedpartitions)",
                                      "broker {{broker}}")], x=16)
row("Groups")
panel("Groups by state", [("sum by (state) (ray_kafka_coordinator_group_groupmetadatamanager_numgroups)",
                           "{{state}}")])
panel("Rebalances", [(f"sum(rate(ray_kafka_server_groupcoordinatormetrics_groupcompletedrebalance_total{R}))",
                      "completed rebalances")], unit="ops", x=8)
panel("Offset commits", [(f"sum(rate(ray_kafka_server_groupcoordinatormetrics_offsetcommit_total{R}))",
                          "partition offsets committed")], unit="ops", x=16)
row("Connections, purgatory, log")
panel("Connections", [("sum by (broker) (ray_kafka_server_socketservermetrics_connectioncount)",
                       "broker {{broker}}")])
panel("Connections opened / closed",
      [(f"sum(rate(ray_kafka_server_socketservermetrics_connectioncreation_total{R}))", "created"),
       (f"sum(rate(ray_kafka_server_socketservermetrics_connectionclose_total{R}))", "closed")], unit="ops", x=8)
panel("Purgatory size", [("sum by (broker, delayedOperation) (ray_kafka_server_delayedoperationpurgatory_purgatorysize)",
                          "{{broker}} {{delayedOperation}}")], x=16)
panel("Log size by topic", [("sum by (topic) (max by (topic, partition, broker) (ray_kafka_log_log_size))",
                             "{{topic}}")], unit="bytes", w=12)
panel("Log end offset by partition", [("max by (topic, partition) (ray_kafka_log_log_logendoffset)",
                                       "{{topic}}-{{partition}}")], x=12, w=12)

dashboard = {
    "title": "raykafka", "uid": "raykafka", "schemaVersion": 39, "version": 1, "editable": True,
    "tags": ["kafka", "raykafka", "ray"], "time": {"from": "now-1h", "to": "now"}, "refresh": "10s",
    "description": "Kafka's broker metrics from raykafka, served by Ray's Prometheus endpoint (README 'Metrics')",
    "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"}]},
    "panels": _panels,
}
Path(__file__).with_name("raykafka.json").write_text(json.dumps(dashboard, indent=1) + "\n")
