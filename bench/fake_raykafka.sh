#!/usr/bin/env bash
# Test double for the raykafka CLI contract, for checking the harness itself
# and for A/A noise checks (the same broker measured as "raykafka" and as
# "tansu" should give ratios near 1.0):
#   .venv/bin/python -m bench.run --raykafka-cmd bench/fake_raykafka.sh
# Understands `start --data-dir D --override listeners=PLAINTEXT://H:P`, runs
# Tansu on H:P and prints `raykafka ready on H:P` like the real CLI.
set -eu
[ "${1:-}" = start ] || { echo "usage: $0 start --override listeners=PLAINTEXT://H:P" >&2; exit 2; }
L=
for a in "$@"; do case $a in listeners=*) L=${a#listeners=PLAINTEXT://};; esac; done
[ -n "$L" ] || { echo "no listeners=PLAINTEXT://H:P override" >&2; exit 2; }
HOST=${L%:*}; PORT=${L##*:}
bash "${RAYKAFKA_TANSU_SH:-/work/shared/peers/tansu.sh}" "$PORT" &
for _ in $(seq 1 600); do
  (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null && break
  sleep 0.1
done
echo "raykafka ready on $HOST:$PORT"
wait
