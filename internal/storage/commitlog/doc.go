// Package commitlog is the append-only log shared by every queue of one
// replication group. Writes stay sequential however many queues exist.
//
// # Files
//
// The log is a sequence of segment files in one directory, each named by the
// LogPos of its first byte (20 decimal digits, ".log"). Positions are
// contiguous across segments: a segment ends where the next one begins. A
// record never spans two segments. The active segment is preallocated to the
// configured size (so a full disk never fails a write into space the log
// already counts on) and memory-mapped for reading; records are written with
// pwrite/pwritev. Unused space is zero. A sealed segment is
// truncated to the bytes it holds.
//
// # Record format, version 1 (little endian)
//
//		 0               4               8   9  10      12              16
//		+---------------+---------------+---+---+-------+---------------+
//		| Length        | CRC32C        |Ver|Fmt| Flags | QueueID       |
//		+---------------+---------------+---+---+-------+---------------+
//		| Term (8)                      | Index (8)                     | 16..32
//		+-------------------------------+---------------+---------------+
//		| BaseOffset (8)                | Count (4)     | KeysLen (4)   | 32..48
//		+-------------------------------+---------------+---------------+
//		| Timestamp (8)                 | StoreTime (8)                 | 48..64
//		+-------------------------------+-------------------------------+
//		| TagHash (8)                   | keys (KeysLen) | payload ...    64..
//		+-------------------------------+-------------------------------+
//
//	  - Length counts the whole record, header included; zero marks the end of
//	    the data in a segment.
//	  - CRC32C (Castagnoli) covers bytes 8..Length: a record whose checksum fails
//	    is never served, and recovery truncates the log before it.
//	  - Ver is the format version (1). A reader refuses versions it does not
//	    know, so an old binary never misreads newer data.
//	  - Fmt is the payload format (model.PayloadFormat); the payload is stored as
//	    the producer sent it (a Kafka record batch, a RocketMQ message).
//	  - Term and Index are the Raft term and the dense record sequence number
//	    (term 1 on a single node).
//	  - BaseOffset and Count: the record holds queue offsets
//	    [BaseOffset, BaseOffset+Count).
//	  - Timestamp is the largest message timestamp in the record; StoreTime is
//	    the broker's append time (ms since the epoch).
//	  - TagHash is the filter hash of the record's tag (0 when none).
//	  - keys is a sequence of {u32 offset delta, u16 length, bytes}: the message
//	    keys and unique ids the key index is built from, so the index can always
//	    be rebuilt from the log.
//
// # Durability
//
// In sync mode an append is acknowledged only after the bytes are on disk;
// concurrent appends share one fsync (group commit). In async mode a
// background flusher syncs every interval. Either way the visible end of the
// log (what readers may see) is tracked separately from the written end.
package commitlog
