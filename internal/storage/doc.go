// Package storage is Rosetta's storage engine: one commit log shared by every
// queue (package commitlog), a per-queue index over it (package queueindex),
// a key index for lookups by message key or unique id (package keyindex), and
// the machinery around them: offset assignment, durability waits, visibility
// limits, long-poll notification, checkpoints and crash recovery, retention
// and the disk-usage guard.
//
// Storage knows bytes, queues, offsets and timestamps. It never knows Kafka,
// RocketMQ or what a topic is; the broker maps topics to queue ids.
//
// # Data directory
//
//	<dir>/identity        cluster id, node id, incarnation (text, key=value)
//	<dir>/log/            commit-log segments (see package commitlog)
//	<dir>/index/<queue>/  queue index files (see package queueindex)
//	<dir>/keys/           key index files (see package keyindex)
//	<dir>/checkpoint      the recovery checkpoint (see checkpoint.go)
//
// # Recovery
//
// A checkpoint records a commit-log position P and, for every queue, the
// state of its index files, all written and fsynced before the checkpoint
// itself. On start the engine loads the checkpoint and replays the log from P:
// queue control records recreate or delete queues, and every data record
// whose offsets are not yet indexed is indexed again. Replay is idempotent, so
// a checkpoint taken while appends continue is still exact. The commit log
// truncates a torn or corrupt tail before replay, and index entries that point
// past the new end are dropped.
package storage
