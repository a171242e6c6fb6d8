#!/usr/bin/env bash
# The cluster chaos run (outside the default test run): three members as
# processes on 127.0.0.11-13, idempotent Kafka producers, KILLS SIGKILLs of
# leaders and followers (default 20); prints failover times and checks
# every acknowledged record. Needs root for the iptables partition test.
set -euo pipefail
cd "$(dirname "$0")/.."
KILLS=${KILLS:-20}
ROSETTA_CLUSTER_CHAOS=$KILLS go test -count=1 -timeout 30m -run 'TestClusterChaos|TestClusterFailover' -v ./test/cluster/ 2>&1 |
  grep -v 'component=etcd' | grep -E '^(---|PASS|FAIL|ok)|cluster_test'
