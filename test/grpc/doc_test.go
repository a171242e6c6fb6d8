// Package grpc_test drives Rosetta's RocketMQ 5 gRPC front-end with the
// official Go client (and one raw gRPC client); the official client's
// tests are built without the race detector (see helpers_test.go).
package grpc_test
