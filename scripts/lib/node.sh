# Sourced by the scripts that run a client library's own tests against a
# Rosetta node: start_node builds the node and starts it with the given
# listener flags (it is stopped and its data removed when the script
# exits), wait_ports waits for its listeners, node_log prints its log.

node_dir=$(mktemp -d)
node_pid=""
stop_node() {
  if [ -n "$node_pid" ]; then kill "$node_pid" 2>/dev/null || true; wait "$node_pid" 2>/dev/null || true; fi
  rm -rf "$node_dir"
}
trap stop_node EXIT

# start_node FLAG...: a node on a fresh data directory, logging warnings.
start_node() {
  go build -o "$node_dir/rosetta" ./cmd/rosetta
  "$node_dir/rosetta" serve --data_dir "$node_dir/data" --log.level warn "$@" >"$node_dir/node.log" 2>&1 &
  node_pid=$!
}

# wait_ports HOST:PORT...: waits (up to 10 s) until each accepts connections.
wait_ports() {
  local addr
  for addr in "$@"; do
    for _ in $(seq 1 100); do
      if (exec 3<>/dev/tcp/"${addr%:*}"/"${addr##*:}") 2>/dev/null; then break; fi
      sleep 0.1
    done
  done
}

# node_log prints the node's log under a heading.
node_log() {
  echo "== the node's log"
  cat "$node_dir/node.log"
}
