// Package apiv1 holds the wire types of the admin API v1 (JSON): what the
// node's handlers answer and the rosetta command's clients decode. Types
// only; the standard library only.
package apiv1

import "time"

// TopicConfig is a topic's configuration. Zero values mean "broker
// default".
type TopicConfig struct {
	RetentionMs     int64  `json:"retention_ms,omitempty"`    // -1 keeps forever
	RetentionBytes  int64  `json:"retention_bytes,omitempty"` // per queue; -1 unlimited
	MaxMessageBytes int32  `json:"max_message_bytes,omitempty"`
	MessageType     string `json:"message_type,omitempty"`   // normal, fifo, delay, transaction, mixed
	CleanupPolicy   string `json:"cleanup_policy,omitempty"` // delete | compact
	TimestampType   string `json:"timestamp_type,omitempty"` // CreateTime | LogAppendTime
	MessageTrace    bool   `json:"message_trace,omitempty"`  // lifecycle events recorded (GET /api/v1/trace)
	NoTiering       bool   `json:"no_tiering,omitempty"`     // records stay on the members' disks, never in the bucket
	// ReplicationFactor (a cluster): copies of each queue, 1, 3 or 5 (0:
	// the cluster's); the queues live in replication groups of that many
	// voters.
	ReplicationFactor int               `json:"replication_factor,omitempty"`
	Extra             map[string]string `json:"extra,omitempty"` // other settings, kept verbatim
}

// TopicAlter is the body of PATCH /api/v1/topics/{topic}: the settings
// given change, the others stay.
type TopicAlter struct {
	Queues          int     `json:"queues,omitempty"` // grow to this many queues (never fewer)
	RetentionMs     *int64  `json:"retention_ms,omitempty"`
	RetentionBytes  *int64  `json:"retention_bytes,omitempty"`
	MaxMessageBytes *int32  `json:"max_message_bytes,omitempty"`
	MessageType     *string `json:"message_type,omitempty"`
	CleanupPolicy   *string `json:"cleanup_policy,omitempty"`
	MessageTrace    *bool   `json:"message_trace,omitempty"`
	NoTiering       *bool   `json:"no_tiering,omitempty"` // applies to segments uploaded from now on
}

// MessageTrace is a message's recorded lifecycle, in time order.
type MessageTrace struct {
	Events []TraceEvent `json:"events"`
}

// TraceEvent is one step of a message's life as the broker saw it.
type TraceEvent struct {
	TimeMs   int64  `json:"time_ms"`
	Time     string `json:"time"` // RFC 3339, milliseconds
	Kind     string `json:"kind"` // produced, delivered, acknowledged, retried, dead-lettered, timer fired, transaction committed, transaction rolled back
	ID       string `json:"id,omitempty"`
	Topic    string `json:"topic"`
	Queue    int32  `json:"queue"`
	Offset   int64  `json:"offset"` // -1: waiting, not in its topic yet
	Protocol string `json:"protocol,omitempty"`
	Group    string `json:"group,omitempty"`
	Client   string `json:"client,omitempty"`
	Attempt  int32  `json:"attempt,omitempty"`
	Detail   string `json:"detail,omitempty"`
	Origin   string `json:"origin,omitempty"` // where a message without an id was first stored (topic@queue:offset)
}

// TopicCreate is the body of POST /api/v1/topics.
type TopicCreate struct {
	Name   string      `json:"name"`
	Queues int         `json:"queues"` // 0: the broker's default
	Config TopicConfig `json:"config"`
}

// RedriveResult says what a re-drive of dead letters did.
type RedriveResult struct {
	Redriven int     `json:"redriven"`
	Skipped  []int64 `json:"skipped,omitempty"` // no origin topic known, or it is gone
	Next     int64   `json:"next"`              // the offset after the last one looked at
}

// TopicSummary is a topic in the topic list.
type TopicSummary struct {
	Name           string `json:"name"`      // as clients name it: orders, ns/orders, tenant/ns/orders
	FullName       string `json:"full_name"` // tenant/namespace/topic
	ID             string `json:"id"`
	Queues         int    `json:"queues"`
	Messages       int64  `json:"messages"` // offsets held: end − start, summed over the queues
	Bytes          int64  `json:"bytes"`
	RetentionMs    int64  `json:"retention_ms"`    // effective; -1 keeps forever
	RetentionBytes int64  `json:"retention_bytes"` // per queue, effective; -1 unlimited
	CreatedMs      int64  `json:"created_ms"`
	Internal       bool   `json:"internal,omitempty"`
	// MessagesPerSec is the rate messages arrived over the last minute
	// (0 until the node has sampled twice).
	MessagesPerSec float64 `json:"messages_per_sec"`
}

// QueueInfo is one queue of a topic (Kafka partition, RocketMQ queue id).
type QueueInfo struct {
	Queue int32 `json:"queue"`
	// Group is the replication group holding the queue (0 on a single
	// node).
	Group int   `json:"group"`
	Start int64 `json:"start"` // first offset held
	End   int64 `json:"end"`   // next offset to be written (Kafka high watermark)
	Bytes int64 `json:"bytes"`
	// LocalStart is the first offset on local disk when the node tiers:
	// offsets from Start below it are read from the bucket.
	LocalStart int64 `json:"local_start,omitempty"`
}

// QueueMove is the body of POST /api/v1/topics/{topic}/queues/{queue}/move
// and its answer: the queue goes on in group ToGroup from offset
// FromOffset; its history stays where it was.
type QueueMove struct {
	Topic      string `json:"topic"`
	Queue      int    `json:"queue"`
	FromGroup  int    `json:"from_group"`
	ToGroup    int    `json:"to_group"`
	FromOffset int64  `json:"from_offset"`
	Millis     int64  `json:"millis"` // how long the move took
}

// TopicDetail is one topic with its queues and configuration.
type TopicDetail struct {
	TopicSummary
	QueueList []QueueInfo `json:"queue_list"`
	Config    TopicConfig `json:"config"`
}

// GroupSummary is a group in the group list.
type GroupSummary struct {
	Name    string `json:"name"`
	Topics  int    `json:"topics"`
	Lag     int64  `json:"lag"`             // messages between the committed offsets and the ends
	Members int    `json:"members"`         // live members
	State   string `json:"state,omitempty"` // Kafka groups: the coordinator's state
	// ConsumedPerSec is the rate its committed offsets advanced over the
	// last minute; Stuck says it was behind for two minutes without
	// committing anything.
	ConsumedPerSec float64 `json:"consumed_per_sec"`
	Stuck          bool    `json:"stuck,omitempty"`
}

// LagPoint is a group's lag at one time.
type LagPoint struct {
	TimeMs int64 `json:"time_ms"`
	Lag    int64 `json:"lag"`
}

// GroupOffset is a group's position in one queue.
type GroupOffset struct {
	Topic        string `json:"topic"`
	Queue        int32  `json:"queue"`
	Committed    int64  `json:"committed"`
	End          int64  `json:"end"`
	Lag          int64  `json:"lag"`
	Metadata     string `json:"metadata,omitempty"`
	CommitTimeMs int64  `json:"commit_time_ms,omitempty"`
}

// GroupDetail is one group's offsets and lag.
type GroupDetail struct {
	Name    string        `json:"name"`
	Lag     int64         `json:"lag"`
	Offsets []GroupOffset `json:"offsets"`
	// Kafka group coordinator state (empty for groups it does not hold):
	// "classic", "consumer" (KIP-848) or "share" (KIP-932), the state
	// and generation or group epoch.
	Type       string `json:"type,omitempty"`
	State      string `json:"state,omitempty"`
	Generation int32  `json:"generation,omitempty"`
	// Members are the live members: Kafka members with their assignment,
	// RocketMQ remoting consumers with their subscriptions (they assign
	// queues among themselves).
	Members []GroupMember `json:"members"`
	// LagHistory is its lag sampled over the last minutes (every 10 s).
	LagHistory []LagPoint `json:"lag_history"`
	// Pop is its progress per queue as a POP consumer (RocketMQ 5
	// SimpleConsumer and PushConsumer, remoting POP, a Kafka share
	// group's acquired records): live, where its
	// committed offsets follow every 30 s.
	Pop []PopProgress `json:"pop,omitempty"`
}

// PopProgress is a POP consumer group's position in one queue.
type PopProgress struct {
	Topic string `json:"topic"`
	Queue int32  `json:"queue"`
	// Base: every offset below is acknowledged (or filtered out); Next:
	// the first offset never handed out.
	Base     int64 `json:"base"`
	Next     int64 `json:"next"`
	InFlight int   `json:"in_flight"` // handed out, not acknowledged
	// Leases are the lowest in-flight messages: invisible until
	// DeadlineMs, handed out Attempts times.
	Leases []PopLease `json:"leases,omitempty"`
}

// PopLease is one message handed out and not acknowledged.
type PopLease struct {
	Offset     int64 `json:"offset"`
	DeadlineMs int64 `json:"deadline_ms"`
	Attempts   int32 `json:"attempts"`
}

// GroupMember is one live member of a consumer group.
type GroupMember struct {
	Protocol      string            `json:"protocol"` // kafka, rocketmq (remoting) or rocketmq-grpc
	MemberID      string            `json:"member_id,omitempty"`
	InstanceID    string            `json:"instance_id,omitempty"`
	ClientID      string            `json:"client_id"`
	Host          string            `json:"host,omitempty"`
	Client        string            `json:"client,omitempty"` // RocketMQ: language and version
	Subscriptions []string          `json:"subscriptions,omitempty"`
	Assignment    []GroupAssignment `json:"assignment,omitempty"`
}

// GroupAssignment is the queues of one topic a member holds.
type GroupAssignment struct {
	Topic  string  `json:"topic"`
	Queues []int32 `json:"queues"`
}

// OffsetReset is the body of POST /api/v1/groups/{group}/reset.
type OffsetReset struct {
	Topic  string  `json:"topic,omitempty"`  // empty: every topic the group has offsets in
	Queues []int32 `json:"queues,omitempty"` // empty: every queue
	To     string  `json:"to"`               // earliest | latest | time | offset
	TimeMs int64   `json:"time_ms,omitempty"`
	Offset int64   `json:"offset,omitempty"`
	DryRun bool    `json:"dry_run,omitempty"`
}

// OffsetMove is one queue's committed offset before and after a reset.
type OffsetMove struct {
	Topic string `json:"topic"`
	Queue int32  `json:"queue"`
	From  int64  `json:"from"` // -1: nothing was committed
	To    int64  `json:"to"`
}

// MessageView is a stored message as the API shows it, whatever protocol
// wrote it.
type MessageView struct {
	Topic        string       `json:"topic"`
	Queue        int32        `json:"queue"`
	Offset       int64        `json:"offset"`
	StoreTimeMs  int64        `json:"store_time_ms"`
	BornTimeMs   int64        `json:"born_time_ms,omitempty"`
	Key          string       `json:"key,omitempty"` // Kafka record key or RocketMQ KEYS (text or base64, as the body)
	Tags         string       `json:"tags,omitempty"`
	Headers      []HeaderView `json:"headers,omitempty"` // Kafka headers, RocketMQ properties
	Body         string       `json:"body"`
	BodyEncoding string       `json:"body_encoding"` // text | base64
	BodyBytes    int          `json:"body_bytes"`
	Compressed   bool         `json:"compressed,omitempty"` // the body is as its RocketMQ producer zlib-compressed it
	Origin       string       `json:"origin,omitempty"`     // a dead letter's origin topic
}

// HeaderView is one header or property.
type HeaderView struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// MessagePage is a page of a queue's messages.
type MessagePage struct {
	Messages   []MessageView `json:"messages"`
	NextOffset int64         `json:"next_offset"` // where the next page starts
	End        int64         `json:"end"`
}

// MessageSend is the body of POST /api/v1/topics/{topic}/messages.
type MessageSend struct {
	Queue        *int32       `json:"queue,omitempty"` // default: by key hash, else queue 0
	Key          string       `json:"key,omitempty"`
	Tags         string       `json:"tags,omitempty"`
	Headers      []HeaderView `json:"headers,omitempty"`
	Body         string       `json:"body"`
	BodyEncoding string       `json:"body_encoding,omitempty"` // text (default) or base64
}

// MessageSent says where a produced message was stored.
type MessageSent struct {
	Topic  string `json:"topic"`
	Queue  int32  `json:"queue"`
	Offset int64  `json:"offset"`       // -1 while it waits (pending)
	ID     string `json:"id,omitempty"` // its unique id (UNIQ_KEY)
	// Pending says what a message that is not readable yet waits for:
	// "timer" (a delivery time, a delay or a delay level; DueMs says when)
	// or "transaction" (a half message); empty: stored and readable.
	Pending string `json:"pending,omitempty"`
	DueMs   int64  `json:"due_ms,omitempty"`
}

// DeadLetterSummary is one group's dead-letter topic.
type DeadLetterSummary struct {
	Group    string `json:"group"`
	Topic    string `json:"topic"`
	Messages int64  `json:"messages"`
	Bytes    int64  `json:"bytes"`
	Start    int64  `json:"start"`
	End      int64  `json:"end"`
}

// Redrive is the body of POST /api/v1/deadletters/{group}/redrive.
type Redrive struct {
	Offsets []int64 `json:"offsets,omitempty"` // these; else the range [from, to)
	From    int64   `json:"from,omitempty"`
	To      int64   `json:"to,omitempty"` // 0: the end
	Max     int     `json:"max,omitempty"`
	ToRetry bool    `json:"to_retry,omitempty"` // the group's retry topic instead of the origin topic
	// Queue is the dead-letter queue the offsets are in, where a cluster
	// spreads topics over several replication groups (each holds one).
	Queue *int32 `json:"queue,omitempty"`
}

// PendingTimers lists timer and delayed messages waiting for their time,
// the earliest first.
type PendingTimers struct {
	Timers []PendingTimer `json:"timers"`
	More   bool           `json:"more"` // the list stops at its limit or scan bound
}

// PendingTimer is one timer or delayed message.
type PendingTimer struct {
	ID         string `json:"id"` // unique id (UNIQ_KEY): what cancelling names
	Topic      string `json:"topic"`
	Queue      int32  `json:"queue"` // -1: any
	Due        string `json:"due"`   // RFC 3339, milliseconds
	DueMillis  int64  `json:"due_ms"`
	DelayLevel int    `json:"delay_level,omitempty"` // RocketMQ delay level; 0: a timer message
	Tags       string `json:"tags,omitempty"`
	Keys       string `json:"keys,omitempty"`
	Size       int    `json:"size"`
	Offset     int64  `json:"offset"` // its entry in the timer log
}

// Transactions lists the transactions in doubt: Kafka transactions open or
// being completed, RocketMQ half messages waiting for their producer.
type Transactions struct {
	Kafka    []KafkaTransaction `json:"kafka"`
	RocketMQ []HalfMessage      `json:"rocketmq"`
}

// KafkaTransaction is one transactional id's open transaction.
type KafkaTransaction struct {
	ID         string           `json:"id"`
	ProducerID int64            `json:"producer_id"`
	Epoch      int16            `json:"epoch"`
	State      string           `json:"state"` // Ongoing, PrepareCommit, PrepareAbort
	TimeoutMs  int32            `json:"timeout_ms"`
	StartMs    int64            `json:"start_ms"`
	Partitions []TopicPartition `json:"partitions"`
	Groups     []string         `json:"groups,omitempty"` // whose offsets it commits
}

// TopicPartition names one queue.
type TopicPartition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

// HalfMessage is a RocketMQ transactional message waiting for its
// producer's commit or rollback (or the broker's check-back).
type HalfMessage struct {
	Offset      int64  `json:"offset"` // what commit and rollback take
	Group       string `json:"group"`  // producer group
	Topic       string `json:"topic"`
	MessageID   string `json:"message_id,omitempty"`
	Keys        string `json:"keys,omitempty"`
	StoredMs    int64  `json:"stored_ms"`
	Checks      int    `json:"checks"`
	NextCheckMs int64  `json:"next_check_ms"`
}

// TierStatus is how tiered storage stands (GET /api/v1/storage/tier).
type TierStatus struct {
	Enabled          bool      `json:"enabled"`
	Segments         int       `json:"segments"`          // committed to the bucket
	Bytes            int64     `json:"bytes"`             // their objects' size
	LocalSegments    int       `json:"local_segments"`    // of them still on local disk
	PendingSegments  int       `json:"pending_segments"`  // sealed, holding live records, not tiered yet
	PendingBytes     int64     `json:"pending_bytes"`     // the upload lag
	UploadedSegments int64     `json:"uploaded_segments"` // by this process
	UploadedBytes    int64     `json:"uploaded_bytes"`    // by this process
	UploadErrors     int64     `json:"upload_errors"`     // failed upload passes
	ColdReads        int64     `json:"cold_reads"`        // ranged GETs of records
	ColdReadBytes    int64     `json:"cold_read_bytes"`
	CacheHits        int64     `json:"cache_hits"` // cold reads served from the cache
	CacheMisses      int64     `json:"cache_misses"`
	LastError        string    `json:"last_error,omitempty"`
	LastErrorAt      time.Time `json:"last_error_at,omitzero"`
}

// TierSegment is one tiered segment.
type TierSegment struct {
	Key        string `json:"key"`
	Term       uint64 `json:"term"`
	Base       int64  `json:"base"`
	End        int64  `json:"end"`
	FirstIndex uint64 `json:"first_index"`
	LastIndex  uint64 `json:"last_index"`
	Bytes      int64  `json:"bytes"`
	Queues     int    `json:"queues"`
	Local      bool   `json:"local"`           // its file is still on local disk
	Group      *int   `json:"group,omitempty"` // its replication group (a cluster's merged answer)
}

// TierReport is GET /api/v1/storage/tier's answer.
type TierReport struct {
	Status   TierStatus    `json:"status"`
	Segments []TierSegment `json:"segments"`
}
