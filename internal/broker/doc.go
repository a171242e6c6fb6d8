// Package broker is Rosetta's protocol-neutral domain core: tenants,
// namespaces and topics with their queues and configuration (kept in the
// metadata store), the message model, durable consumer-group offsets and
// long-poll waits. Front-ends translate their protocols into calls on Broker
// with model types; the broker never imports a protocol package, and it maps
// topics onto storage queue ids so storage never learns what a topic is.
package broker
