#!/usr/bin/env bash
# What a replica costs: the same workload against a single node and against
# three members (127.0.0.11-13, default groups, replication factor 3), the
# brokers on core 0 and the load generator on core 1, sync durability.
# Prints the bench's throughput and latency and each broker process's CPU
# seconds per million messages (utime+stime over the run).
#   go build -o rosetta ./cmd/rosetta && go build -o rosetta-bench ./cmd/rosetta-bench
#   WORKLOAD=kafka100|kafka1k|rocketmq MODE=single|cluster scripts/replica-bench.sh
# MSGS=<n> changes the amount; PROFILE=<seconds> also saves a CPU profile of
# the first member (or the node) from the middle of the run to $OUT;
# ADD_GROUPS=<n> adds that many replication groups to the cluster (rosetta
# cluster groups add) before the run, so the topic spreads over 3+n groups;
# MOVE=1 (with ADD_GROUPS=3) makes the topic of 12 queues over the first
# three groups and moves every queue to an added group before the run
# (Kafka clients follow; RocketMQ clients send to the queue's home group,
# whose leader appends in the new one);
# PROTOCOL=1 (with MODE=cluster) adds a protocol-only node on 127.0.0.21
# (core 0 too) and sends the load through it alone.
set -u
BIN=${BIN:-./rosetta}
BENCH=${BENCH:-./rosetta-bench}
WORKLOAD=${WORKLOAD:-kafka100}
MODE=${MODE:-cluster}
OUT=${OUT:-/tmp/replica-bench}
D=$(mktemp -d /tmp/replica.XXXX)
M=1=127.0.0.11,2=127.0.0.12,3=127.0.0.13
mkdir -p "$OUT"
cleanup() {
  pkill -9 -f "serve --data_dir $D" 2>/dev/null
  while pgrep -f "serve --data_dir $D" >/dev/null; do sleep 0.2; done
  rm -rf "$D"
}
trap cleanup EXIT
pids=()
if [ "$MODE" = single ]; then
  taskset -c 0 $BIN serve --data_dir $D/d1 --listen.host 127.0.0.11 --storage.durability sync > $D/log1 2>&1 &
  pids+=($!)
else
  for i in 1 2 3; do
    taskset -c 0 $BIN serve --data_dir $D/d$i --cluster.node_id $i --cluster.members $M --storage.durability sync --storage.segment_size ${SEGMENT:-1GiB} > $D/log$i 2>&1 &
    pids+=($!)
  done
fi
ENTRY=127.0.0.11
if [ "$MODE" = cluster ] && [ -n "${PROTOCOL:-}" ]; then
  taskset -c 0 $BIN serve --data_dir $D/p21 --cluster.node_id 21 --cluster.members $M --cluster.roles protocol --listen.host 127.0.0.21 > $D/log21 2>&1 &
  pids+=($!)
  ENTRY=127.0.0.21
fi
# Until every group has a leader and serves (the admin API answers on each).
for _ in $(seq 1 120); do
  sleep 0.5
  ok=1
  for h in 127.0.0.11 $( [ "$MODE" = cluster ] && echo 127.0.0.12 127.0.0.13 ) $( [ "$ENTRY" != 127.0.0.11 ] && echo $ENTRY ); do
    curl -sf "http://$h:8080/api/v1/cluster" | python3 -c 'import json,sys; s=json.load(sys.stdin); sys.exit(0 if all(g.get("leader") for g in s["groups"]) else 1)' || ok=0
  done
  [ $ok = 1 ] && break
done
if [ "$MODE" = cluster ] && [ -n "${MOVE:-}" ]; then
  # The topic made over the three groups first; once ADD_GROUPS=3 added
  # three more, each queue moves to the group three further on.
  $BIN topic create rb --queues 12 --admin http://127.0.0.11:8080 > /dev/null || exit 1
fi
if [ "$MODE" = cluster ] && [ -n "${ADD_GROUPS:-}" ]; then
  $BIN cluster groups add "$ADD_GROUPS" --admin http://127.0.0.11:8080 > /dev/null || exit 1
  want=$((3 + ADD_GROUPS))
  for _ in $(seq 1 120); do
    sleep 0.5
    curl -sf "http://127.0.0.11:8080/api/v1/cluster" | python3 -c "import json,sys; s=json.load(sys.stdin); g=s['groups']; sys.exit(0 if len(g)==$want and all(x.get('leader') for x in g) else 1)" && break
  done
fi
if [ "$MODE" = cluster ] && [ -n "${MOVE:-}" ]; then
  for q in $(seq 0 11); do
    $BIN topic move rb --queue $q --to-group $(( q % 3 + 3 )) --admin http://127.0.0.11:8080 || exit 1
  done
fi
sleep 2
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
# context switches of every thread of a process
switches() { cat /proc/$1/task/*/status 2>/dev/null | awk '/ctxt_switches/ {n+=$2} END {print n+0}'; }
split() { awk '{print "utime", $14, "stime", $15, "minflt", $10, "nvcsw"}' /proc/$1/stat; grep -E '^(voluntary|nonvoluntary)_ctxt_switches' /proc/$1/status | tr '\n' ' '; echo; }
declare -A before
declare -A sw
for p in "${pids[@]}"; do before[$p]=$(cpu $p); sw[$p]=$(switches $p); done
profiler=
if [ -n "${PROFILE:-}" ]; then
  (sleep 5; curl -s -o "$OUT/$WORKLOAD-$MODE.pprof" "http://127.0.0.11:8080/debug/pprof/profile?seconds=$PROFILE") &
  profiler=$!
fi
case $WORKLOAD in
  kafka100) n=${MSGS:-2000000}; run=(kafka produce --brokers $ENTRY:9092 --partitions 12 --linger 5ms --size 100) ;;
  kafka1k) n=${MSGS:-500000}; run=(kafka produce --brokers $ENTRY:9092 --partitions 12 --linger 5ms --size 1024) ;;
  rocketmq) n=${MSGS:-200000}; run=(rocketmq produce --namesrv $ENTRY:9876 --senders 64 --size 128) ;;
  *) echo "unknown WORKLOAD $WORKLOAD"; exit 2 ;;
esac
taskset -c 1 $BENCH "${run[@]}" --topic rb --messages $n 2>&1 | grep -vE '^\s*$' | tail -8
hz=$(getconf CLK_TCK)
total=0
for p in "${pids[@]}"; do
  d=$(( $(cpu $p) - ${before[$p]} ))
  total=$(( total + d ))
  s=$(( $(switches $p) - ${sw[$p]} ))
  awk -v d=$d -v hz=$hz -v n=$n -v p=$p -v s=$s 'BEGIN{printf "pid %d: %.2f CPU-s per million messages, %.0f context switches per million\n", p, d/hz/n*1e6, s/n*1e6}'
done
awk -v d=$total -v hz=$hz -v n=$n 'BEGIN{printf "all brokers: %.2f CPU-s per million messages\n", d/hz/n*1e6}'
for p in "${pids[@]}"; do split $p; done
du -sh $D/d* | sed "s|/tmp/replica[^/]*/||"; [ -n "${KEEP:-}" ] && find $D -type f -size +10M -exec ls -la {} + | awk "{print \$5, \$9}" | sed "s|/tmp/replica[^/]*/||" | head -40
[ -n "$profiler" ] && wait $profiler
