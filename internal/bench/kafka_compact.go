package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaCompactOptions describe a compaction workload against a node.
type KafkaCompactOptions struct {
	KafkaOptions
	Keys  int
	Admin string // the node's admin HTTP address
}

// KafkaCompact produces o.Messages updates over o.Keys keys to a compacted
// topic, then has the node clean it (POST /api/v1/storage/compact) and
// reports the pass: records scanned per second, messages removed.
func KafkaCompact(ctx context.Context, o KafkaCompactOptions) (*Report, error) {
	cl, err := o.client()
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	policy := "compact"
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, int32(o.Partitions), -1, map[string]*string{"cleanup.policy": &policy}, o.Topic); err != nil &&
		!strings.Contains(err.Error(), "TOPIC_ALREADY_EXISTS") {
		return nil, err
	}
	value := make([]byte, o.Size)
	start := time.Now()
	for i := int64(0); i < o.Messages; i++ {
		cl.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprintf("key-%06d", i%int64(o.Keys))), Value: value}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		return nil, err
	}
	produced := time.Since(start)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+o.Admin+"/api/v1/storage/compact", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("compact: %s", resp.Status)
	}
	var res struct {
		Queues, Records, Rewritten, Holes int
		Messages                          int64
		Took                              time.Duration
	}
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return nil, err
	}
	r := &Report{Name: fmt.Sprintf("kafka compaction: %d updates over %d keys, %d partitions, %d B values, compression %s",
		o.Messages, o.Keys, o.Partitions, o.Size, o.Compression), Elapsed: res.Took}
	r.Extra = append(r.Extra,
		fmt.Sprintf("produced in %v", produced.Round(time.Millisecond)),
		fmt.Sprintf("pass: %d queues, %d stored batches read, %d messages removed, %d batches rewritten, %d removed whole, in %v",
			res.Queues, res.Records, res.Messages, res.Rewritten, res.Holes, res.Took.Round(time.Millisecond)),
		fmt.Sprintf("compaction throughput: %.0f records/s (updates scanned twice: key map, then rewrite)", float64(o.Messages)/res.Took.Seconds()))
	return r, nil
}
