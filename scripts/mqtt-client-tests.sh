#!/usr/bin/env bash
# Runs paho.mqtt.golang's own functional tests (fvt_client_test.go and
# fvt_store_test.go, which dial a broker on 127.0.0.1:1883) against a
# Rosetta node started on that port. MQTT_TESTS overrides the subset (a
# -run pattern); docs/compat/mqtt.md lists what is left out and why.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/lib/node.sh
start_node --listen.mqtt 127.0.0.1:1883 --listen.mqtt_ssl "" --listen.http 127.0.0.1:0 --listen.pulsar "" --listen.pulsar_ssl "" \
  --listen.kafka 127.0.0.1:0 --listen.remoting 127.0.0.1:0 --listen.grpc 127.0.0.1:0
wait_ports 127.0.0.1:1883
tests=${MQTT_TESTS:-$(grep -v '^#' test/mqtt/upstream-tests.txt | grep . | paste -sd'|')}
if ! go test ${MQTT_TEST_FLAGS:-} -count=1 -timeout 10m -run "^(${tests})\$" github.com/eclipse/paho.mqtt.golang; then
  node_log
  exit 1
fi
