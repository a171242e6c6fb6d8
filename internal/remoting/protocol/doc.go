// Package protocol is the RocketMQ remoting wire codec: the RemotingCommand
// frame with its JSON or ROCKETMQ binary header, and the request and
// response codes. It is pure: no connections, contexts or logging.
//
// A frame (big endian):
//
//	total length i32 (excludes itself) | serialize type u8 | header length u24 |
//	header (JSON object, or the binary layout below) | body
//
// The binary (ROCKETMQ, serialize type 1) header:
//
//	code i16 | language u8 | version i16 | opaque i32 | flag i32 |
//	remark length i32 | remark | ext length i32 |
//	ext: repeat { key length i16 | key | value length i32 | value }
//
// The JSON header is {"code","language","version","opaque","flag","remark",
// "extFields":{string:string}}. Flag bit 0 marks a response, bit 1 a one-way
// request. Request codes above 32767 (RocketMQ 5 POP) only fit JSON headers.
package protocol
