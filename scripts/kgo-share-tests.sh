#!/usr/bin/env bash
# Runs franz-go's own share group tests (TestShareGroup* in pkg/kgo: ETL
# chains of share consumers with accept, release and reject, acks on
# close, the share offsets admin calls), which run only against a broker
# advertising ShareFetch and ShareAcknowledge v2, against a Rosetta node.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=$(mktemp -d)
node=""
cleanup() {
  if [ -n "$node" ]; then kill "$node" 2>/dev/null || true; wait "$node" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT

addr=127.0.0.1:${KGO_SHARE_PORT:-19092}
go build -o "$dir/rosetta" ./cmd/rosetta
"$dir/rosetta" serve --data_dir "$dir/data" --log.level warn \
  --listen.kafka "$addr" --listen.http 127.0.0.1:0 --listen.remoting 127.0.0.1:0 --listen.grpc 127.0.0.1:0 \
  --listen.pulsar "" --listen.pulsar_ssl "" --listen.mqtt "" --listen.mqtt_ssl "" >"$dir/node.log" 2>&1 &
node=$!
for _ in $(seq 1 100); do
  if (exec 3<>/dev/tcp/"${addr%:*}"/"${addr#*:}") 2>/dev/null; then break; fi
  sleep 0.1
done
if ! KGO_SEEDS="$addr" go test -count=1 -timeout 10m -v -run '^TestShareGroup' github.com/twmb/franz-go/pkg/kgo >"$dir/test.log" 2>&1; then
  grep -v '^\[' "$dir/test.log" | tail -100
  echo "== the node's log"; cat "$dir/node.log"
  exit 1
fi
# The tests skip (and pass) when the broker does not advertise share
# groups: make sure they ran.
if grep -q -- '--- SKIP' "$dir/test.log" || ! grep -q -- '--- PASS: TestShareGroupETL' "$dir/test.log"; then
  grep -E -- '^(---|===)' "$dir/test.log"
  echo "franz-go's share group tests did not run" >&2
  exit 1
fi
grep -E -- '^--- ' "$dir/test.log"
