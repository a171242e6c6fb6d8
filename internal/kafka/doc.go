// Package kafka is Rosetta's Kafka wire-protocol front-end. It frames
// requests, decodes them with franz-go's kmsg, dispatches them through one
// static table (which also drives the ApiVersions answer) to one handler file
// per API key, and writes responses in request order.
//
// Connection shape: a reader goroutine checks each frame's size against the
// limit before allocating and reserves its bytes from a broker-wide budget; a
// processor goroutine runs handlers in request order (as Kafka does per
// connection); a writer goroutine waits for each response's durability
// condition and writes responses in order, so pipelined produce requests on
// one connection share group commits.
//
// Handlers translate into broker calls with model types; they never touch
// storage, and protocol error codes are chosen in errmap.go only.
package kafka
