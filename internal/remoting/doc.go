// Package remoting is the RocketMQ remoting front-end: one listener serving
// the name-server and broker roles (as the RocketMQ 5 proxy does), so an
// unmodified remoting client pointed at its address finds topics and
// brokers there. Each connection has one reader and one writer goroutine;
// requests run concurrently (a pull may park for its suspend timeout) up to
// a per-connection bound, and responses are matched by opaque, so they may
// leave in any order. Request codes map to handlers in one table; a code
// with no handler is answered REQUEST_CODE_NOT_SUPPORTED with a remark.
//
// The wire codec lives in the protocol subpackage.
package remoting
