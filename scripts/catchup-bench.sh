#!/usr/bin/env bash
# How long a member 1 GiB behind takes to catch up: three members on
# 127.0.0.11-13 (default groups), member 3 stopped while 1 GiB of 1 KiB
# Kafka records goes to the others, then started again; prints the time
# from its start until every group's leader sees it holding everything
# committed. MSGS=<records> changes the amount.
#   go build -o rosetta ./cmd/rosetta && go build -o rosetta-bench ./cmd/rosetta-bench
#   BIN=./rosetta BENCH=./rosetta-bench scripts/catchup-bench.sh
set -u
BIN=${BIN:-./rosetta}
BENCH=${BENCH:-./rosetta-bench}
D=$(mktemp -d /tmp/catchup.XXXX)
M=1=127.0.0.11,2=127.0.0.12,3=127.0.0.13
start() { $BIN serve --data_dir $D/d$1 --cluster.node_id $1 --cluster.members $M --storage.durability async > $D/log$1 2>&1 & }
cleanup() {
  pkill -9 -f "serve --data_dir $D"
  while pgrep -f "serve --data_dir $D" >/dev/null; do sleep 0.2; done
  rm -rf $D
}
trap cleanup EXIT
for i in 1 2 3; do start $i; done
sleep 8
pkill -TERM -f "serve --data_dir $D/d3 "
while pgrep -f "serve --data_dir $D/d3 " >/dev/null; do sleep 0.2; done
$BENCH kafka produce --brokers 127.0.0.11:9092,127.0.0.12:9092 --topic catchup --partitions 12 \
  --messages ${MSGS:-1048576} --size 1024 2>&1 | grep -E '^(messages|throughput)'
t0=$(date +%s.%N)
start 3
python3 - "$t0" <<'PY'
import json, sys, time, urllib.request
t0 = float(sys.argv[1])
while time.time() - t0 < 600:
    time.sleep(0.2)
    lags, groups = {}, 0
    for h in ("127.0.0.11", "127.0.0.12", "127.0.0.13"):
        try:
            s = json.load(urllib.request.urlopen(f"http://{h}:8080/api/v1/cluster", timeout=2))
        except Exception:
            continue
        groups = max(groups, len(s["groups"]))
        for g in s["groups"]:
            if g.get("role") == "leader":
                for p in g.get("progress") or []:
                    if p["node"] == 3:
                        lags[g["id"]] = p["lag"]
    if groups and len(lags) == groups and all(v == 0 for v in lags.values()):
        print(f"member 3 caught up {time.time()-t0:.2f} s after its start (lag per group {lags})")
        sys.exit(0)
print("member 3 did not catch up in 600 s", lags)
sys.exit(1)
PY
