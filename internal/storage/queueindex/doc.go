// Package queueindex is the per-queue index over the shared commit log: for
// every stored record of a queue, where it is in the log and which offsets it
// holds. It answers "where is offset N" and "which offset was current at time
// T" for one queue without touching any other queue's data.
//
// # Files
//
// Each queue has a directory index/<queue id>/ of fixed-capacity files named
// by the number of their first entry (20 decimal digits, ".idx"). A file
// starts with a 16-byte header and holds fixed-width entries:
//
//	header: "RIDX" | version u32 (1) | queue id u32 | reserved u32
//
//	entry (40 bytes, little endian):
//	 0        8            16     20      24        32        40
//	+--------+------------+------+-------+---------+---------+
//	| LogPos | BaseOffset | Size | Count | MaxTime | TagHash |
//	+--------+------------+------+-------+---------+---------+
//
// MaxTime is the running maximum of record timestamps up to and including this
// entry, so it is monotonic and a binary search by time is exact: the first
// entry whose MaxTime reaches T is the first record holding a timestamp >= T.
//
// The newest entries of a queue live in memory and are written to the files in
// chunks and at every checkpoint; the index is derived data and the storage
// engine rebuilds any tail it lacks from the commit log after a crash.
// Open files are shared through a bounded cache so that 50,000 queues do not
// need 50,000 descriptors.
package queueindex
