package model

import "errors"

// Sentinel errors shared by every layer. The core wraps them with %w; each
// front-end maps them to protocol codes in exactly one place with errors.Is.
var (
	ErrUnknownTopic       = errors.New("unknown topic")
	ErrTopicExists        = errors.New("topic already exists")
	ErrInvalidTopic       = errors.New("invalid topic name")
	ErrUnknownQueue       = errors.New("unknown queue")
	ErrInvalidQueueCount  = errors.New("invalid queue count")
	ErrOffsetOutOfRange   = errors.New("offset out of range")
	ErrMessageTooLarge    = errors.New("message too large")
	ErrCorruptRecord      = errors.New("corrupt record")
	ErrDiskFull           = errors.New("disk usage limit reached: writes refused")
	ErrClosed             = errors.New("closed")
	ErrInvalidConfig      = errors.New("invalid configuration")
	ErrUnsupportedVersion = errors.New("unsupported format version")
	ErrNotFound           = errors.New("not found")
)
