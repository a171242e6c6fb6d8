#!/usr/bin/env bash
# The cluster chaos run (outside the default test run): three members as
# processes on 127.0.0.11-13; franz-go idempotent and transactional
# producers and a consumer group, rocketmq-client-go and RocketMQ 5 clients;
# KILLS failures (default 20: SIGKILLs of leaders and followers, partitions,
# graceful stops, rolling restarts); prints failover times and checks every
# acknowledged record. Then the same with three replication groups
# (cluster.groups 3) under every client: how long a failed member's groups
# go without a leader and Kafka produces to them wait. Needs root for the
# iptables partitions.
set -euo pipefail
cd "$(dirname "$0")/.."
KILLS=${KILLS:-20}
ROSETTA_CLUSTER_CHAOS=$KILLS ROSETTA_CLUSTER_GROUPS_CHAOS=$KILLS go test -count=1 -timeout 45m \
  -run 'TestClusterChaos|TestClusterFailover|TestClusterGroupsChaos' -v ./test/cluster/ 2>&1 |
  grep -v 'component=etcd' | grep -E '^(---|PASS|FAIL|ok)|_test.go:'
