// Package grpc_test drives Rosetta's RocketMQ 5 gRPC front-end with the
// official Go client; its tests are built without the race detector (see
// helpers_test.go), and this file keeps the package non-empty when they are
// left out.
package grpc_test
