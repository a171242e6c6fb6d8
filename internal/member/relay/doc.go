// Package relay carries a cluster member's client connections to whoever
// serves them. Each listener of the member is a Route: while the member
// serves the listener's replication group, its connections go to the
// term's protocol servers through a Listener; otherwise a Relayer copies
// them, byte for byte, to the same port on the group's leader.
//
// A connection (Conn) keeps what its client sent until the first byte of
// an answer goes back. When leadership moves before anything was answered
// — the term's servers stop, or the leader's end of a relay goes away —
// the connection moves to the next leader and those bytes are replayed
// there, rather than being closed: a client whose connection closes
// before its first answer takes that for a misconfiguration. What was
// answered is never replayed; such a connection closes and the client
// reconnects.
//
//	client ──▶ Route.Raw ──┬─▶ Listener ──▶ term servers (this member serves)
//	                       └─▶ relay ──▶ leader's same port (it does not)
//	                             │ leader moved, nothing answered
//	                             └─▶ relay again, kept bytes replayed
package relay
