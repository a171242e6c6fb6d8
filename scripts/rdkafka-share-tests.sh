#!/usr/bin/env bash
# Runs librdkafka's share consumer (KIP-932; librdkafka 2.15.1, C API,
# preview) against Rosetta: builds librdkafka from the source inside the npm
# package @confluentinc/kafka-javascript 1.10.1 (once, into a cache
# directory; about a minute on two cores), then test/kafka/interop/rdkafka-share's
# program, then runs TestShareGroupLibrdkafka with it. scripts/test.sh runs
# it.
set -euo pipefail
cd "$(dirname "$0")/.."

tools="${ROSETTA_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/rosetta-tools}"
src="$tools/librdkafka-2.15.1"
if [ ! -f "$src/src/librdkafka.a" ]; then
  echo "== building librdkafka 2.15.1 into $src"
  work=$(mktemp -d)
  (cd "$work" && npm pack --silent @confluentinc/kafka-javascript@1.10.1 >/dev/null && tar xzf confluentinc-kafka-javascript-1.10.1.tgz)
  rm -rf "$src"
  mkdir -p "$tools"
  mv "$work/package/deps/librdkafka" "$src"
  rm -rf "$work"
  (cd "$src" && ./configure --disable-ssl --disable-gssapi --disable-curl --disable-zstd --disable-sasl >/dev/null &&
    make -C src -j"$(nproc)" librdkafka.a >/dev/null)
fi
bin="$tools/rdkafka-share-consumer"
gcc -O2 -o "$bin" test/kafka/interop/rdkafka-share/share_consumer.c -I"$src/src" "$src/src/librdkafka.a" \
  -lpthread -lz -lm -ldl -lrt
ROSETTA_RDKAFKA_SHARE="$bin" go test -count=1 -timeout 10m -v -run '^TestShareGroupLibrdkafka$' ./test/kafka/
