#!/usr/bin/env bash
# Runs Rosetta's whole test suite: vet, unit, integration (real Kafka clients:
# franz-go, sarama, kcat/librdkafka 2.0, node-rdkafka/librdkafka 2.12,
# kafkajs, kafka-python; RocketMQ and Pulsar clients, pulsar-client-go's and
# franz-go's own (share group) tests; the web console in headless Chromium), crash and
# fuzz-seed tests, with the race detector; tiered storage against a real S3
# server (versitygw). Installs what the tests need when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# stage names a step of the run with the seconds elapsed since it began.
stage() { echo "== [${SECONDS}s] $*"; }

# versitygw, the S3 server of the tiered-storage tests (a Go module, built
# once into a cache directory; a few minutes, in the background meanwhile).
tools="${ROSETTA_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/rosetta-tools}"
export ROSETTA_VERSITYGW="$tools/versitygw"
vgw_pid=""
if [ ! -x "$ROSETTA_VERSITYGW" ]; then
  stage "building versitygw into $tools (background)"
  mkdir -p "$tools"
  GOBIN="$tools" go install github.com/versity/versitygw/cmd/versitygw@v1.8.0 >"$tools/versitygw-build.log" 2>&1 &
  vgw_pid=$!
fi

need_apt=()
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc) # the race detector needs cgo
command -v g++ >/dev/null 2>&1 || need_apt+=(g++) # node-rdkafka builds librdkafka from source
command -v make >/dev/null 2>&1 || need_apt+=(make)
[ -f /usr/include/zlib.h ] || need_apt+=(zlib1g-dev) # librdkafka 2.15's share consumer links zlib
command -v kcat >/dev/null 2>&1 || need_apt+=(kcat)
/usr/bin/python3 -c "import kafka" >/dev/null 2>&1 || need_apt+=(python3-kafka)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs npm)
[ -x /usr/bin/etcd ] || need_apt+=(etcd-server) # an external etcd as the metadata store
command -v iptables >/dev/null 2>&1 || need_apt+=(iptables) # network partitions between cluster members on loopback
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium) # the web console's browser test (chromedp)
if [ ${#need_apt[@]} -gt 0 ]; then
  stage "installing: ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if [ ! -d test/kafka/interop/kafkajs/node_modules/kafkajs ]; then
  stage "npm ci (kafkajs)"
  (cd test/kafka/interop/kafkajs && npm ci --no-audit --no-fund --loglevel=error)
fi
rdk_pid=""
if [ ! -d test/kafka/interop/rdkafka/node_modules/node-rdkafka/build/Release ]; then
  # node-rdkafka 3.6.1 compiles its bundled librdkafka 2.12 (a few minutes,
  # in the background: the tests that use it run after the race detector's
  # pass); npm 11 runs its install script only once approved.
  stage "npm ci (node-rdkafka, builds librdkafka; background)"
  mkdir -p "$tools"
  (cd test/kafka/interop/rdkafka &&
    { npm install-scripts approve node-rdkafka >/dev/null 2>&1 || true; } &&
    npm ci --no-audit --no-fund --loglevel=error) >"$tools/node-rdkafka-build.log" 2>&1 &
  rdk_pid=$!
fi

if [ -n "$vgw_pid" ] && ! wait "$vgw_pid"; then
  cat "$tools/versitygw-build.log"
  echo "building versitygw failed" >&2
  exit 1
fi

stage "go vet"
go vet ./...
# The tests driving node-rdkafka run after this pass, without the race
# detector, once librdkafka is built.
rdkafka_tests='TestKIP848Librdkafka|TestTransactionsLibrdkafka'
stage "go test -race"
go test -race -count=1 -timeout 25m -skip "$rdkafka_tests" ./...
if [ -n "$rdk_pid" ] && ! wait "$rdk_pid"; then
  cat "$tools/node-rdkafka-build.log"
  echo "building node-rdkafka failed" >&2
  exit 1
fi

# The cluster tests run beside the stages below: their members are child
# processes mostly waiting on timers and on each other (under half a core
# between them), on 127.0.0.11-17 and ports of their own. Their output is
# printed once they end; a failing stage meanwhile stops them.
stage "cluster tests (background: members as child processes on 127.0.0.11-17)"
cluster_log="$(mktemp)"
setsid -w go test -count=1 -timeout 18m -run 'TestClusterGroups|TestClusterReplicationFactors|TestClusterSevenMembers|TestClusterProtocolNodes|TestClusterMembers|TestClusterSnapshot|TestClusterStopExit|TestClusterCoordinatorFailover|TestClusterPOPHandOff|TestClusterTiering|TestClusterQueueMoves|TestClusterQueueBalancer|TestClusterPulsar|TestClusterMQTT|TestClusterShareGroup' ./test/cluster/ >"$cluster_log" 2>&1 &
cluster_pid=$!
trap 'kill -- -"$cluster_pid" 2>/dev/null || kill "$cluster_pid" 2>/dev/null || true' EXIT

stage "node-rdkafka (librdkafka 2.12) tests, without -race"
go test -count=1 -timeout 5m -run "$rdkafka_tests" ./test/kafka/
stage "librdkafka 2.15's share consumer (built from the source in its npm package)"
./scripts/rdkafka-share-tests.sh
stage "go test (client code with known data races of its own, without -race)"
go test -count=1 -timeout 5m -run 'TestOrderedConsumption|TestOrderedThroughConsumerRestart|TestGroupSplitsQueuesAndSurvivesAStop|TestOffsetsSurviveRestarts|TestStatsAndResetByTime|TestPullConsumerSeeks|TestTieredHistoryPullConsumer|TestDashboardRelaysToConsumers|TestRemotingTLS' ./test/rocketmq/
go test -count=1 -timeout 5m -run 'TestPulsarToRocketMQ' ./test/pulsar/
stage "pulsar-client-go's own tests against a node on localhost:6650 and :8080"
./scripts/pulsar-client-tests.sh
stage "paho.mqtt.golang's own functional tests against a node on 127.0.0.1:1883"
./scripts/mqtt-client-tests.sh
stage "franz-go's own share group tests against a node on 127.0.0.1:19092"
./scripts/kgo-share-tests.sh
stage "admin and console tests without -race"
go test -count=1 -timeout 5m -run 'TestGroupMembers|TestMessageTrace|TestConsoleWithClients|TestConsoleRedriveAndReset' ./test/admin/ ./test/console/
stage "flood memory test"
go test -count=1 -timeout 5m -run 'TestFloodMemoryComesBack' ./test/flood/ # memory is not measured under the race detector
stage "go test ./test/grpc ./test/replay ./test/telemetry ./internal/bench (the v5 client races on its own settings; without -race)"
go test -count=1 -timeout 10m -parallel 4 ./test/grpc/ ./test/replay/ ./test/telemetry/ ./internal/bench/
stage "waiting for the cluster tests"
cluster_rc=0
wait "$cluster_pid" || cluster_rc=$?
trap - EXIT
cat "$cluster_log"
rm -f "$cluster_log"
if [ "$cluster_rc" -ne 0 ]; then
  echo "the cluster tests failed" >&2
  exit 1
fi
stage "all passed"
