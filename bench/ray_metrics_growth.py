"""Does Ray's metrics client hold memory per series it reports? A plain actor
(nothing of raykafka's) sets SERIES gauge series spread over INSTRUMENTS Ray
Gauges every INTERVAL seconds, as core/metrics.py's reporter thread does;
its RSS is printed every 10 s.

    .venv/bin/python -m bench.ray_metrics_growth --series 6200 --instruments 6 --seconds 90
    RAY_enable_open_telemetry=0 .venv/bin/python -m bench.ray_metrics_growth ...   # OpenCensus

Measured figures: bench/README.md, "Protocol fuzz".
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--series", type=int, default=6200)
    parser.add_argument("--instruments", type=int, default=6)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=90)
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import psutil
    import ray

    @ray.remote(num_cpus=0)
    class Setter:
        def __init__(self, series: int, instruments: int):
            from ray.util import metrics as ray_metrics

            self.series = series
            self.gauges = [ray_metrics.Gauge(f"raykafka_growth{j}_bucket", "growth probe",
                                             tag_keys=("broker", "request", "le")) for j in range(instruments)]

        def pid(self) -> int:
            return os.getpid()

        def report(self, round_index: int) -> None:
            gauges = self.gauges
            for i in range(self.series):
                gauges[i % len(gauges)].set(round_index + i, {"broker": "0", "request": f"r{i // 17}",
                                                              "le": str(i % 17)})

    ray.init(include_dashboard=False, _temp_dir=tempfile.mkdtemp(prefix="rk-ray-", dir="/tmp"), num_cpus=1)
    try:
        setter = Setter.remote(args.series, args.instruments)
        process = psutil.Process(ray.get(setter.pid.remote()))
        ray.get(setter.report.remote(0))
        first = process.memory_info().rss / 2**20
        started = last = time.monotonic()
        index = 0
        while time.monotonic() - started < args.seconds:
            index += 1
            ray.get(setter.report.remote(index))
            time.sleep(args.interval)
            if time.monotonic() - last >= 10:
                last = time.monotonic()
                print(f"t={last - started:.0f}s RSS {process.memory_info().rss / 2**20:.1f} MiB", flush=True)
        rss = process.memory_info().rss / 2**20
        path = "OpenCensus" if os.environ.get("RAY_enable_open_telemetry", "1").lower() in ("0", "false") \
            else "OpenTelemetry"
        print(f"{path}: {args.series} series on {args.instruments} gauges every {args.interval} s, {index} reports "
              f"in {time.monotonic() - started:.0f} s: RSS {first:.1f} -> {rss:.1f} MiB ({rss - first:+.1f})")
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
