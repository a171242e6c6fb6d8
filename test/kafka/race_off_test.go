//go:build !race

package kafka_test

// raceDetector: the suite runs without the race detector.
const raceDetector = false
