//go:build race

package flood

// raceDetector: the race detector multiplies a process's memory, so
// memory bounds are not checked under it.
const raceDetector = true
