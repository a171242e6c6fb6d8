#!/usr/bin/env bash
# Runs a subset of pulsar-client-go's own tests (its pulsar package, which
# expects a broker on localhost:6650 and the admin API on localhost:8080)
# against a Rosetta node started on those ports. The subset is
# test/pulsar/upstream-tests.txt; docs/compat/pulsar.md says why the rest
# is left out.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=$(mktemp -d)
node=""
cleanup() {
  if [ -n "$node" ]; then kill "$node" 2>/dev/null || true; wait "$node" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT

go build -o "$dir/rosetta" ./cmd/rosetta
"$dir/rosetta" serve --data_dir "$dir/data" --log.level warn \
  --listen.http 127.0.0.1:8080 --listen.pulsar 127.0.0.1:6650 --listen.pulsar_ssl 127.0.0.1:6651 \
  --listen.kafka 127.0.0.1:0 --listen.remoting 127.0.0.1:0 --listen.grpc 127.0.0.1:0 --listen.mqtt "" --listen.mqtt_ssl "" >"$dir/node.log" 2>&1 &
node=$!
for _ in $(seq 1 100); do
  if (exec 3<>/dev/tcp/127.0.0.1/6650) 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/8080) 2>/dev/null; then break; fi
  sleep 0.1
done
tests=${PULSAR_TESTS:-$(grep -v '^#' test/pulsar/upstream-tests.txt | grep . | paste -sd'|')}
if ! go test ${PULSAR_TEST_FLAGS:-} -count=1 -timeout "${PULSAR_TEST_TIMEOUT:-10m}" -run "^(${tests})\$" github.com/apache/pulsar-client-go/pulsar; then
  echo "== the node's log"; cat "$dir/node.log"
  exit 1
fi
