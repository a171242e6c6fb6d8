#!/usr/bin/env bash
# Runs Rosetta's whole test suite: vet, unit, integration (real Kafka clients:
# franz-go, sarama, kcat/librdkafka, kafkajs, kafka-python), crash and
# fuzz-seed tests, with the race detector. Installs what the tests need when
# it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc) # the race detector needs cgo
command -v kcat >/dev/null 2>&1 || need_apt+=(kcat)
/usr/bin/python3 -c "import kafka" >/dev/null 2>&1 || need_apt+=(python3-kafka)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs npm)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "== installing: ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if [ ! -d test/kafka/interop/kafkajs/node_modules/kafkajs ]; then
  echo "== npm ci (kafkajs)"
  (cd test/kafka/interop/kafkajs && npm ci --no-audit --no-fund --loglevel=error)
fi

echo "== go vet"
go vet ./...
echo "== go test -race"
go test -race -count=1 -timeout 25m ./...
