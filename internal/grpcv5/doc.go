// Package grpcv5 is the RocketMQ 5 gRPC front-end: it implements the
// official apache.rocketmq.v2 MessagingService (the generated code of
// rocketmq-clients, not regenerated here) over the broker core. One
// listener plays the proxy and broker roles: routes point back at the
// address the client used. The telemetry stream carries the settings
// handshake and server-to-client commands (transaction recovery).
package grpcv5
