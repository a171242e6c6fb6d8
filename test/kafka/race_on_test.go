//go:build race

package kafka_test

// raceDetector: the suite runs under the race detector, which makes the
// broker and the clients several times slower; volume tests send less.
const raceDetector = true
