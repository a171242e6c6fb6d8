#!/usr/bin/env bash
# Tiered storage's cost and speed on a single node (127.0.0.1) with a real
# S3 server (versitygw, posix backend, on 127.0.0.1:19000): the broker on
# core 0, the load generator on core 1, sync durability, 64 MiB segments.
#   go build -o rosetta ./cmd/rosetta && go build -o rosetta-bench ./cmd/rosetta-bench
#   TIER=on|off WORKLOAD=kafka100|kafka1k|rocketmq scripts/tier-bench.sh
# With TIER=on segments are uploaded as they seal and leave local disk at
# once (local retention 0). Prints the produce figures and the broker's CPU
# per million messages; for the Kafka workloads with TIER=on it then
# restarts the broker (an empty cache) and reads the topic back from the
# start — every byte from the bucket — and prints the catch-up read, the
# ranged GETs it took (per GiB), their latency and the cache's hit ratio;
# before it, the time to a first record (kcat) with nothing cached.
# ROSETTA_VERSITYGW names the versitygw binary (scripts/test.sh builds one).
set -u
BIN=${BIN:-./rosetta}
BENCH=${BENCH:-./rosetta-bench}
VGW=${ROSETTA_VERSITYGW:-${XDG_CACHE_HOME:-$HOME/.cache}/rosetta-tools/versitygw}
TIER=${TIER:-on}
WORKLOAD=${WORKLOAD:-kafka1k}
D=$(mktemp -d /tmp/tierbench.XXXX)
AK=bench SK=bench-secret
cleanup() {
  pkill -9 -f "serve --data_dir $D" 2>/dev/null
  pkill -9 -f "versitygw --port 127.0.0.1:19000" 2>/dev/null
  while pgrep -f "serve --data_dir $D" >/dev/null; do sleep 0.2; done
  rm -rf "$D"
}
trap cleanup EXIT
mkdir -p $D/s3 $D/iam
ROOT_ACCESS_KEY=$AK ROOT_SECRET_KEY=$SK taskset -c 1 $VGW --port 127.0.0.1:19000 --iam-dir $D/iam --quiet posix $D/s3 >$D/vgw.log 2>&1 &
for _ in $(seq 1 50); do curl -s -o /dev/null http://127.0.0.1:19000/ && break; sleep 0.1; done
curl -sf --aws-sigv4 "aws:amz:us-east-1:s3" --user $AK:$SK -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -X PUT http://127.0.0.1:19000/tier >/dev/null || { echo "cannot create the bucket"; exit 1; }
flags=(--data_dir $D/node --listen.host 127.0.0.1 --storage.durability sync --storage.segment_size 64MiB)
if [ "$TIER" = on ]; then
  flags+=(--storage.tier.bucket tier --storage.tier.endpoint http://127.0.0.1:19000 --storage.tier.access_key $AK
    --storage.tier.secret_key $SK --storage.tier.local_retention 0 --storage.tier.local_retention_bytes 0
    --storage.tier.upload_interval 1s)
fi
start() {
  taskset -c 0 $BIN serve "${flags[@]}" >> $D/log 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do curl -sf http://127.0.0.1:8080/healthz >/dev/null && break; sleep 0.2; done
}
start
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
case $WORKLOAD in
  kafka100) n=${MSGS:-3000000}; run=(kafka produce --brokers 127.0.0.1:9092 --partitions 12 --linger 5ms --size 100) ;;
  kafka1k) n=${MSGS:-1000000}; run=(kafka produce --brokers 127.0.0.1:9092 --partitions 12 --linger 5ms --size 1024) ;;
  rocketmq) n=${MSGS:-200000}; run=(rocketmq produce --namesrv 127.0.0.1:9876 --senders 64 --size 128) ;;
  *) echo "unknown WORKLOAD $WORKLOAD"; exit 2 ;;
esac
before=$(cpu $pid)
taskset -c 1 $BENCH "${run[@]}" --topic tb --messages $n 2>&1 | grep -vE '^\s*$' | tail -8
hz=$(getconf CLK_TCK)
awk -v d=$(( $(cpu $pid) - before )) -v hz=$hz -v n=$n 'BEGIN{printf "broker: %.2f CPU-s per million messages\n", d/hz/n*1e6}'
[ "$TIER" = on ] || exit 0
# Until everything sealed is in the bucket and gone from local disk.
for _ in $(seq 1 300); do
  curl -sf -X POST http://127.0.0.1:8080/api/v1/storage/tier/upload >/dev/null
  curl -sf -X POST http://127.0.0.1:8080/api/v1/storage/retention >/dev/null
  pending=$(curl -sf http://127.0.0.1:8080/api/v1/storage/tier | python3 -c 'import json,sys; s=json.load(sys.stdin)["status"]; print(s["pending_segments"]+s["local_segments"])')
  [ "$pending" = 0 ] && break
  sleep 1
done
curl -sf http://127.0.0.1:8080/api/v1/storage/tier | python3 -c 'import json,sys; s=json.load(sys.stdin)["status"]; print("tiered: %d segments, %.0f MiB; uploaded %.0f MiB" % (s["segments"], s["bytes"]/2**20, s["uploaded_bytes"]/2**20))'
grep -o 'segment tiered.*took=[0-9.]*m\?s' $D/log | awk -F'took=' '{print $2}' | python3 -c '
import sys
ms=[float(l[:-2]) if l.strip().endswith("ms") else float(l[:-2] if l.strip().endswith("µs") else l[:-1])*1000 for l in sys.stdin.read().split()]
if ms: print("upload: %d objects of 64 MiB, %.0f ms each on average, %.0f MB/s" % (len(ms), sum(ms)/len(ms), 64*1.048576*len(ms)/(sum(ms)/1000)))'
case $WORKLOAD in kafka*) ;; *) exit 0 ;; esac
kill $pid; wait $pid 2>/dev/null
start
# Time to first byte: one record of a partition whose history is all in
# the bucket, nothing cached (kcat's own start included; a second partition
# after the first shows the cost without the object's index).
if command -v kcat >/dev/null; then
  for p in 0 1; do
    t0=$(date +%s%N)
    taskset -c 1 kcat -C -b 127.0.0.1:9092 -t tb -p $p -o beginning -c 1 -e -q >/dev/null 2>&1
    echo "time to first record of partition $p from the bucket (kcat): $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  done
fi
echo "catch-up read of the whole topic from the bucket (the broker restarted: empty cache):"
taskset -c 1 $BENCH "${run[@]/produce/consume}" --topic tb --messages $n 2>&1 | grep -vE '^\s*$' | tail -6
curl -sf http://127.0.0.1:8080/metrics | python3 -c '
import sys
m={}
for l in sys.stdin:
    if l.startswith("rosetta_tier_"):
        k,v=l.rsplit(" ",1); m[k]=float(v)
gets=m.get("rosetta_tier_cold_reads_total",0); b=m.get("rosetta_tier_cold_read_bytes_total",0)
hits=m.get("rosetta_tier_cache_hits_total",0); miss=m.get("rosetta_tier_cache_misses_total",0)
cnt=m.get("rosetta_tier_cold_read_seconds_count",0); s=m.get("rosetta_tier_cold_read_seconds_sum",0)
print("cold reads: %d ranged GETs, %.0f MiB, %.1f GETs per GiB, %.1f ms per GET on average, cache hits %.1f%%" % (gets, b/2**20, gets/(b/2**30) if b else 0, 1000*s/cnt if cnt else 0, 100*hits/(hits+miss) if hits+miss else 0))'
