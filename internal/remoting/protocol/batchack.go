package protocol

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// BatchAck is one entry of a BATCH_ACK_MESSAGE body: the messages of one
// popped queue acknowledged as bits above StartOffset (the POP_CK's
// ckOffset). Upstream writes the short JSON names and reads the long ones
// too; both are accepted.
type BatchAck struct {
	ConsumerGroup string
	Topic         string
	Retry         string
	StartOffset   int64
	QueueID       int32
	ReviveQueueID int32
	PopTime       int64
	InvisibleTime int64
	// Offsets are the acknowledged queue offsets, ascending.
	Offsets []int64
}

// MaxBatchAckBits bounds the offsets one entry may name.
const MaxBatchAckBits = 1 << 16

type batchAckJSON struct {
	C, ConsumerGroup string
	T, Topic         string
	R, Retry         string
	SO               *int64 `json:"so"`
	StartOffset      *int64
	Q, QueueID       *int32
	RQ               *int32 `json:"rq"`
	ReviveQueueID    *int32
	PT               *int64 `json:"pt"`
	PopTime          *int64
	IT               *int64 `json:"it"`
	InvisibleTime    *int64
	B, BitSet        json.RawMessage
}

// DecodeBatchAckBody decodes the JSON body of BATCH_ACK_MESSAGE:
// {"brokerName": …, "acks": [BatchAck…]}. The bit set is java.util.BitSet's
// byte array (bit i = byte i/8, bit i%8), as a base64 string or an array
// of byte values.
func DecodeBatchAckBody(body []byte) (brokerName string, acks []BatchAck, err error) {
	var raw struct {
		BrokerName string
		Acks       []batchAckJSON
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return "", nil, fmt.Errorf("batch ack body: %w", err)
	}
	for i := range raw.Acks {
		a, err := raw.Acks[i].decode()
		if err != nil {
			return "", nil, fmt.Errorf("batch ack %d: %w", i, err)
		}
		acks = append(acks, a)
	}
	return raw.BrokerName, acks, nil
}

func (j *batchAckJSON) decode() (BatchAck, error) {
	a := BatchAck{ConsumerGroup: either(j.C, j.ConsumerGroup), Topic: either(j.T, j.Topic), Retry: either(j.R, j.Retry),
		StartOffset: deref(j.SO, j.StartOffset), QueueID: deref(j.Q, j.QueueID), ReviveQueueID: deref(j.RQ, j.ReviveQueueID),
		PopTime: deref(j.PT, j.PopTime), InvisibleTime: deref(j.IT, j.InvisibleTime)}
	bits := j.B
	if len(bits) == 0 {
		bits = j.BitSet
	}
	set, err := decodeBitSet(bits)
	if err != nil {
		return BatchAck{}, err
	}
	if len(set)*8 > MaxBatchAckBits {
		return BatchAck{}, errors.New("bit set too large")
	}
	if a.StartOffset < 0 || a.StartOffset > math.MaxInt64-MaxBatchAckBits {
		return BatchAck{}, errors.New("start offset out of range")
	}
	for i, v := range set {
		for bit := range 8 {
			if v&(1<<bit) != 0 {
				a.Offsets = append(a.Offsets, a.StartOffset+int64(i*8+bit))
			}
		}
	}
	return a, nil
}

func decodeBitSet(raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("bit set: %w", err)
		}
		return b, nil
	}
	var arr []int8
	if err := json.Unmarshal(raw, &arr); err == nil {
		b := make([]byte, len(arr))
		for i, v := range arr {
			b[i] = byte(v)
		}
		return b, nil
	}
	var ub []uint8
	if err := json.Unmarshal(raw, &ub); err != nil {
		return nil, fmt.Errorf("bit set: %w", err)
	}
	return ub, nil
}

func either(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func deref[T any](a, b *T) T {
	var zero T
	switch {
	case a != nil:
		return *a
	case b != nil:
		return *b
	}
	return zero
}
