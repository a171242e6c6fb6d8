#!/usr/bin/env bash
# Runs a subset of pulsar-client-go's own tests (its pulsar package, which
# expects a broker on localhost:6650 and the admin API on localhost:8080)
# against a Rosetta node started on those ports. The subset is
# test/pulsar/upstream-tests.txt; docs/compat/pulsar.md says why the rest
# is left out.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/lib/node.sh
start_node --listen.http 127.0.0.1:8080 --listen.pulsar 127.0.0.1:6650 --listen.pulsar_ssl 127.0.0.1:6651 \
  --listen.kafka 127.0.0.1:0 --listen.remoting 127.0.0.1:0 --listen.grpc 127.0.0.1:0 --listen.mqtt "" --listen.mqtt_ssl ""
wait_ports 127.0.0.1:6650 127.0.0.1:8080
tests=${PULSAR_TESTS:-$(grep -v '^#' test/pulsar/upstream-tests.txt | grep . | paste -sd'|')}
if ! go test ${PULSAR_TEST_FLAGS:-} -count=1 -timeout "${PULSAR_TEST_TIMEOUT:-10m}" -run "^(${tests})\$" github.com/apache/pulsar-client-go/pulsar; then
  node_log
  exit 1
fi
