package kafka_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// TestFetchSessions opens a KIP-227 session, fetches incrementally (only
// partitions with news come back) and checks the epoch rules.
func TestFetchSessions(t *testing.T) {
	n := startNode(t)
	ctx := ctxTimeout(t, 30*time.Second)
	versions := kversion.Stable()
	versions.SetMaxKeyVersion(1, 12) // name topics, not ids
	cl := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic("sess"), kgo.AllowAutoTopicCreation(),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MaxVersions(versions))
	if err := cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("a")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	fetch := func(id, epoch int32, parts map[int32]int64) *kmsg.FetchResponse {
		req := kmsg.NewPtrFetchRequest()
		req.SetVersion(12)
		req.ReplicaID, req.MaxWaitMillis, req.MaxBytes, req.SessionID, req.SessionEpoch = -1, 0, 1<<20, id, epoch
		if len(parts) > 0 {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = "sess"
			for p, off := range parts {
				rp := kmsg.NewFetchRequestTopicPartition()
				rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, off, 1<<20
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	full := fetch(0, 0, map[int32]int64{0: 0, 1: 0, 2: 0})
	if full.SessionID == 0 || len(full.Topics) != 1 || len(full.Topics[0].Partitions) != 3 {
		t.Fatalf("session not created: %+v", full)
	}
	id := full.SessionID
	// Nothing changed: an incremental fetch naming the new offset of 0.
	inc := fetch(id, 1, map[int32]int64{0: 1})
	if inc.ErrorCode != 0 || len(inc.Topics) != 0 {
		t.Fatalf("incremental without news returned %+v", inc.Topics)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Partition: 2, Value: []byte("b")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	inc = fetch(id, 2, nil)
	if len(inc.Topics) != 1 || len(inc.Topics[0].Partitions) != 1 || inc.Topics[0].Partitions[0].Partition != 2 ||
		len(inc.Topics[0].Partitions[0].RecordBatches) == 0 {
		t.Fatalf("incremental after produce: %+v", inc.Topics)
	}
	if bad := fetch(id, 7, nil); bad.ErrorCode != kerr.InvalidFetchSessionEpoch.Code {
		t.Fatalf("wrong epoch: code %d", bad.ErrorCode)
	}
	if gone := fetch(123456, 1, nil); gone.ErrorCode != kerr.FetchSessionIDNotFound.Code {
		t.Fatalf("unknown session: code %d", gone.ErrorCode)
	}
}
