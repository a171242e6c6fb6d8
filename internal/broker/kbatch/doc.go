// Package kbatch reads Kafka record batches (magic 2), the payload format
// Kafka producers write and the engine stores as received: the fixed header,
// validation of produced batches, and the records inside a batch (with
// decompression), for the broker features that look into batches: exact
// time lookups, idempotent-producer state and key checks of compacted topics.
//
// Layout of a batch (big endian):
//
//	base offset i64 | length i32 | partition leader epoch i32 | magic i8 (2) |
//	crc u32 (CRC-32C of what follows) | attributes i16 | last offset delta i32 |
//	first timestamp i64 | max timestamp i64 | producer id i64 | producer epoch i16 |
//	base sequence i32 | record count i32 | records (compressed per attributes & 7)
//
// Each record: length varint | attributes i8 | timestamp delta varlong |
// offset delta varint | key length varint (-1 null) | key | value length
// varint | value | header count varint | headers (key length, key, value
// length, value).
package kbatch
