#!/usr/bin/env bash
# Runs franz-go's own share group tests (TestShareGroup* in pkg/kgo: ETL
# chains of share consumers with accept, release and reject, acks on
# close, the share offsets admin calls), which run only against a broker
# advertising ShareFetch and ShareAcknowledge v2, against a Rosetta node.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/lib/node.sh
addr=127.0.0.1:${KGO_SHARE_PORT:-19092}
start_node --listen.kafka "$addr" --listen.http 127.0.0.1:0 --listen.remoting 127.0.0.1:0 --listen.grpc 127.0.0.1:0 \
  --listen.pulsar "" --listen.pulsar_ssl "" --listen.mqtt "" --listen.mqtt_ssl ""
wait_ports "$addr"
if ! KGO_SEEDS="$addr" go test -count=1 -timeout 10m -v -run '^TestShareGroup' github.com/twmb/franz-go/pkg/kgo >"$node_dir/test.log" 2>&1; then
  grep -v '^\[' "$node_dir/test.log" | tail -100
  node_log
  exit 1
fi
# The tests skip (and pass) when the broker does not advertise share
# groups: make sure they ran.
if grep -q -- '--- SKIP' "$node_dir/test.log" || ! grep -q -- '--- PASS: TestShareGroupETL' "$node_dir/test.log"; then
  grep -E -- '^(---|===)' "$node_dir/test.log"
  echo "franz-go's share group tests did not run" >&2
  exit 1
fi
grep -E -- '^--- ' "$node_dir/test.log"
