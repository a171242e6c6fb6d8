// Package tier keeps sealed commit-log segments of a replication group in an
// S3-compatible bucket: the object format a segment is uploaded in, and
// reading records back from such objects by their commit-log position.
//
// # Object format, version 1 (little endian)
//
// A commit-log segment interleaves the records of many queues. Its object
// holds the same records, byte for byte, grouped by queue (ascending queue
// id, log order within a queue), so that reading one queue reads only that
// queue's bytes; an index after the data says where each queue's records are
// and where each record of the segment went; a fixed trailer ends the
// object:
//
//		+--------------------------------------------------------------+
//		| data: queue A's records | queue B's records | ...            |  DataLen bytes
//		+--------------------------------------------------------------+
//		| index header (48)                                            |
//		|   SegmentBase u64 | SegmentLen u64 | FirstIndex u64 |        |
//		|   LastIndex u64 | Queues u32 | Records u32 | MaxTime i64     |
//		| queue table: Queues × 48                                     |
//		|   Queue u32 | Records u32 | FirstOffset i64 | EndOffset i64 |
//		|   Start u64 | Length u64 | MaxTimestamp i64                  |
//		| record map: Records × 8, in log order                        |
//		|   SegRel u32 (position - SegmentBase) | ObjRel u32           |
//		+--------------------------------------------------------------+
//		| trailer (48)                                                 |
//		|   Magic "RSTO" | Version u16 | 0 u16 | DataLen u64 |          |
//		|   IndexLen u32 | IndexCRC u32 | DataCRC u32 | 0 u32 |         |
//		|   SegmentBase u64 | TrailerCRC u32 | Magic "OTSR"             |
//		+--------------------------------------------------------------+
//
//	  - Every record keeps its own CRC32C (package commitlog), so a record read
//	    back by a ranged GET is verified alone; IndexCRC and DataCRC (CRC32C)
//	    are also carried by the record that commits the object to the group's
//	    log, and an object whose trailer disagrees with it is never served.
//	  - The queue table is sorted by queue id, so Start grows with it and the
//	    queues' data ranges tile [0, DataLen).
//	  - The record map lets a reader holding a record's commit-log position
//	    (the queue index stores positions) find it in the object with one
//	    binary search; SegRel and ObjRel are 32 bits, so a tiered segment holds
//	    at most 4 GiB.
//	  - Records of topics that opted out of tiering are left out (DataLen is
//	    then less than SegmentLen and the record map skips them); the local
//	    copies of those records outlive the segment (package storage).
//	  - A cold read fetches the trailer (a suffix GET of 48 bytes) unless the
//	    commit record already gave the index's place, then the index (cached),
//	    then ranged GETs of one queue's records.
package tier
