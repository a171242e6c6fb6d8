package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime/pprof"
	"time"

	"github.com/spf13/cobra"

	"github.com/rosettamq/rosetta/internal/app"
	"github.com/rosettamq/rosetta/internal/bench"
)

func benchCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Load generators for Rosetta: the storage engine in process, Kafka, RocketMQ remoting and RocketMQ 5 clients against a node"}
	var o bench.StorageOptions
	var size, cpuProfile string
	st := &cobra.Command{
		Use:   "storage",
		Short: "Append to the storage engine directly and report msgs/s, MB/s, latency, CPU/msg and RSS",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if size != "" {
				b, err := app.ParseByteSize(size)
				if err != nil {
					return err
				}
				o.SegmentSize = int64(b)
			}
			if cpuProfile != "" {
				pf, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				defer pf.Close()
				if err := pprof.StartCPUProfile(pf); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			r, err := bench.Storage(cmd.Context(), o)
			if err != nil {
				return err
			}
			r.Print(cmd.OutOrStdout())
			return nil
		},
	}
	f := st.Flags()
	f.StringVar(&o.Dir, "dir", "", "data directory (default: a temporary one, removed afterwards)")
	f.BoolVar(&o.Sync, "sync", false, "sync durability (fsync before acknowledging; group commit)")
	f.Int64Var(&o.Messages, "messages", 2_000_000, "messages to append")
	f.IntVar(&o.Size, "size", 100, "bytes per message")
	f.IntVar(&o.MsgsPerRecord, "msgs-per-record", 1, "messages per stored record (a Kafka batch)")
	f.IntVar(&o.RecordsPerCall, "batch", 1, "records per append call")
	f.IntVar(&o.Queues, "queues", 16, "queues to spread appends over")
	f.IntVar(&o.Appenders, "appenders", 1, "concurrent appenders")
	f.StringVar(&size, "segment-size", "", "segment size (default 1GiB)")
	f.BoolVar(&o.Keys, "keys", false, "give each record a key (key index on)")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile to this file")
	f.BoolVar(&o.KeepData, "keep", false, "keep the data directory")
	f.BoolVar(&o.CrashAtEnd, "crash", false, "SIGKILL the process after the workload (prepares a restart benchmark)")

	var rdir string
	var rsync bool
	restart := &cobra.Command{
		Use:   "restart",
		Short: "Time opening an existing data dir until the first write is accepted",
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := bench.Restart(cmd.Context(), rdir, rsync)
			if err != nil {
				return err
			}
			r.Print(cmd.OutOrStdout())
			return nil
		},
	}
	restart.Flags().StringVar(&rdir, "dir", "", "data directory written by `bench storage --keep|--crash`")
	restart.Flags().BoolVar(&rsync, "sync", false, "open in sync durability")

	var ddir string
	var dsize string
	var dblock string
	disk := &cobra.Command{
		Use:   "disk",
		Short: "Measure sequential write bandwidth and latency with an fdatasync per block",
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := app.ParseByteSize(dsize)
			if err != nil {
				return err
			}
			blk, err := app.ParseByteSize(dblock)
			if err != nil {
				return err
			}
			r, err := bench.Disk(ddir, int64(b), int(blk))
			if err != nil {
				return err
			}
			r.Print(cmd.OutOrStdout())
			return nil
		},
	}
	disk.Flags().StringVar(&ddir, "dir", os.TempDir(), "directory on the disk to measure")
	disk.Flags().StringVar(&dsize, "size", "1GiB", "bytes to write")
	disk.Flags().StringVar(&dblock, "block", "1MiB", "bytes written before each fdatasync (small blocks: the fsync latency group commit pays)")

	var idleQueues int
	idle := &cobra.Command{
		Use:   "idle-queues",
		Short: "Report heap bytes per idle queue",
		RunE: func(cmd *cobra.Command, _ []string) error {
			per, err := bench.IdleQueueMemory(cmd.Context(), idleQueues)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "idle queues    %d, %.0f heap bytes per queue\n", idleQueues, per)
			return nil
		},
	}
	idle.Flags().IntVar(&idleQueues, "queues", 50000, "queues to create")
	var to bench.TimerOptions
	timer := &cobra.Command{Use: "timer", Short: "Schedule timer messages in process: scheduling rate, memory with them pending, restart time",
		RunE: func(c *cobra.Command, _ []string) error {
			if to.Dir == "" {
				dir, err := os.MkdirTemp("", "rosetta-timer-bench")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				to.Dir = dir
			}
			r, err := bench.Timer(c.Context(), to)
			if err != nil {
				return err
			}
			r.Print(c.OutOrStdout())
			return nil
		}}
	timer.Flags().StringVar(&to.Dir, "dir", "", "data directory (a temporary one when empty)")
	timer.Flags().Int64Var(&to.Messages, "messages", 1_000_000, "timer messages")
	timer.Flags().DurationVar(&to.Spread, "spread", time.Hour, "due times spread over this long")
	timer.Flags().IntVar(&to.Size, "size", 128, "body bytes")
	timer.Flags().IntVar(&to.Senders, "senders", 64, "concurrent schedulers")
	timer.Flags().BoolVar(&to.Sync, "sync", false, "sync durability")
	timer.Flags().BoolVar(&to.Deliver, "deliver", false, "wait for delivery and report lateness (due times from +2 s over --spread)")
	var gco bench.GCOptions
	gc := &cobra.Command{Use: "gc", Short: "Garbage collection in process: a log Live-fraction live, foreground append latency without and during a pass, pass throughput",
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := bench.GC(cmd.Context(), gco)
			if err != nil {
				return err
			}
			r.Print(cmd.OutOrStdout())
			return nil
		}}
	gc.Flags().StringVar(&gco.Dir, "dir", "", "data directory (a temporary one when empty)")
	gc.Flags().Int64Var(&gco.LogBytes, "log-bytes", 2<<30, "bytes written before collecting")
	gc.Flags().Float64Var(&gco.Live, "live", 0.3, "fraction of them left live")
	gc.Flags().IntVar(&gco.Record, "record", 1024, "bytes per record")
	gc.Flags().Int64Var(&gco.Segment, "segment", 64<<20, "segment size")
	gc.Flags().Int64Var(&gco.Rate, "rate", 4<<20, "GC pace, bytes per second (0: unpaced)")
	gc.Flags().IntVar(&gco.Senders, "senders", 16, "concurrent foreground appenders")
	gc.Flags().IntVar(&gco.Size, "size", 128, "foreground record bytes")
	var fo bench.FloodOptions
	flood := &cobra.Command{Use: "flood", Short: "Floods every listener (idle, slow, huge and malformed requests) and reports the broker's RSS and a real producer's latency",
		RunE: func(c *cobra.Command, _ []string) error {
			_, err := bench.Flood(c.Context(), fo, c.OutOrStdout())
			return err
		}}
	ff := flood.Flags()
	ff.StringVar(&fo.Kafka, "kafka", "127.0.0.1:9092", "Kafka listener")
	ff.StringVar(&fo.Remoting, "remoting", "127.0.0.1:9876", "RocketMQ remoting listener")
	ff.StringVar(&fo.GRPC, "grpc", "127.0.0.1:8081", "RocketMQ 5 gRPC listener")
	ff.StringVar(&fo.HTTP, "http", "127.0.0.1:8080", "admin HTTP listener")
	ff.IntVar(&fo.BrokerPID, "broker-pid", 0, "the broker's pid (required: its RSS is the result)")
	ff.IntVar(&fo.Idle, "idle", 5000, "idle connections held")
	ff.IntVar(&fo.Slow, "slow", 200, "connections sending a request a byte a second")
	ff.IntVar(&fo.Huge, "huge", 200, "connections announcing 64 MiB frames")
	ff.IntVar(&fo.ExtFrames, "ext-frames", 2000, "remoting frames with 200 KB of ext fields")
	ff.IntVar(&fo.Malformed, "malformed", 500, "connections sending garbage, per listener")
	ff.DurationVar(&fo.Hold, "hold", 20*time.Second, "how long the flood lasts")
	ff.DurationVar(&fo.After, "after", 30*time.Second, "how long the broker's RSS is watched after the flood")
	cmd.AddCommand(st, restart, disk, idle, timer, gc, flood, kafkaBenchCmd(), rocketmqBenchCmd(), grpcBenchCmd(), pulsarBenchCmd(), mqttBenchCmd())
	return cmd
}

func kafkaBenchCmd() *cobra.Command {
	var o bench.KafkaOptions
	cmd := &cobra.Command{Use: "kafka", Short: "Kafka workloads driven with franz-go against a running node"}
	pf := cmd.PersistentFlags()
	pf.StringVar(&o.Brokers, "brokers", "127.0.0.1:9092", "seed brokers")
	pf.StringVar(&o.Topic, "topic", "bench", "topic (created if missing)")
	pf.IntVar(&o.Partitions, "partitions", 16, "partitions when creating the topic")
	pf.IntVar(&o.Size, "size", 100, "bytes per record value")
	pf.Int64Var(&o.Messages, "messages", 2_000_000, "records")
	pf.DurationVar(&o.Linger, "linger", 5*time.Millisecond, "producer linger")
	pf.Int32Var(&o.BatchBytes, "batch-bytes", 1<<20, "producer max batch bytes")
	pf.StringVar(&o.Acks, "acks", "all", "all, leader or none")
	pf.StringVar(&o.Compression, "compression", "none", "none, gzip, snappy, lz4 or zstd")
	pf.IntVar(&o.BrokerPID, "broker-pid", 0, "the broker's pid, to report its CPU and RSS")
	pf.StringVar(&o.SASLMechanism, "sasl-mechanism", "", "authenticate with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
	pf.StringVar(&o.SASLUser, "sasl-user", "", "SASL user")
	pf.StringVar(&o.SASLPassword, "sasl-password", "", "SASL password")
	pf.BoolVar(&o.TLS, "tls", false, "connect with TLS (any certificate accepted)")
	produce := &cobra.Command{Use: "produce", Short: "Produce as fast as acknowledged", RunE: runReport(&o, bench.KafkaProduce)}
	e2e := &cobra.Command{Use: "e2e", Short: "End-to-end latency at a fixed rate", RunE: runReport(&o, bench.KafkaEndToEnd)}
	e2e.Flags().IntVar(&o.Rate, "rate", 50000, "messages per second")
	consume := &cobra.Command{Use: "consume", Short: "Catch-up read of a topic from the start", RunE: runReport(&o, bench.KafkaConsume)}
	var so bench.KafkaShareOptions
	share := &cobra.Command{Use: "share", Short: "A share group (KIP-932) reading a topic from the start",
		RunE: func(c *cobra.Command, _ []string) error {
			so.KafkaOptions = o
			r, err := bench.KafkaShare(c.Context(), so)
			if err != nil {
				return err
			}
			r.Print(c.OutOrStdout())
			return nil
		}}
	share.Flags().IntVar(&so.Members, "members", 3, "share consumers")
	share.Flags().BoolVar(&so.AckEach, "ack-each", false, "accept each record explicitly and flush acknowledgements per poll")
	share.Flags().Int32Var(&so.MaxRecords, "max-records", 500, "records per ShareFetch (max.poll.records)")
	var g bench.GroupJoinOptions
	join := &cobra.Command{Use: "group-join", Short: "Time for a group to converge after a third member joins",
		RunE: func(c *cobra.Command, _ []string) error {
			g.KafkaOptions = o
			r, err := bench.KafkaGroupJoin(c.Context(), g)
			if err != nil {
				return err
			}
			r.Print(c.OutOrStdout())
			return nil
		}}
	join.Flags().StringVar(&g.Protocol, "protocol", "consumer", "consumer (KIP-848) or classic (cooperative-sticky)")
	join.Flags().IntVar(&g.Rounds, "rounds", 5, "joins measured")
	join.Flags().DurationVar(&g.Heartbeat, "heartbeat", 3*time.Second, "classic members' heartbeat interval")
	join.Flags().DurationVar(&g.Settle, "settle", 5*time.Second, "pause after two members settle, before the third joins")
	var co bench.KafkaCompactOptions
	compact := &cobra.Command{Use: "compact", Short: "Updates over a key set to a compacted topic, then one compaction pass on the node",
		RunE: func(c *cobra.Command, _ []string) error {
			co.KafkaOptions = o
			r, err := bench.KafkaCompact(c.Context(), co)
			if err != nil {
				return err
			}
			r.Print(c.OutOrStdout())
			return nil
		}}
	compact.Flags().IntVar(&co.Keys, "keys", 1000, "distinct keys")
	compact.Flags().StringVar(&co.Admin, "admin", "127.0.0.1:8080", "the node's admin HTTP address")
	var x bench.KafkaTxnOptions
	txn := &cobra.Command{Use: "txn", Short: "Transactions of --txn-size records from concurrent transactional producers",
		RunE: func(c *cobra.Command, _ []string) error {
			x.KafkaOptions = o
			r, err := bench.KafkaTransactions(c.Context(), x)
			if err != nil {
				return err
			}
			r.Print(c.OutOrStdout())
			return nil
		}}
	txn.Flags().IntVar(&x.Producers, "producers", 4, "transactional producers")
	txn.Flags().IntVar(&x.Txns, "txns", 4000, "transactions in all")
	txn.Flags().IntVar(&x.TxnSize, "txn-size", 100, "records per transaction")
	txn.Flags().BoolVar(&x.Plain, "plain", false, "no transactions: flush each group of --txn-size records instead (for comparison)")
	cmd.AddCommand(compact, produce, e2e, consume, share, join, txn)
	return cmd
}

func rocketmqBenchCmd() *cobra.Command {
	var o bench.RocketMQOptions
	cmd := &cobra.Command{Use: "rocketmq", Short: "RocketMQ remoting workloads driven with rocketmq-client-go against a running node"}
	pf := cmd.PersistentFlags()
	pf.StringVar(&o.NameServer, "namesrv", "127.0.0.1:9876", "name server address(es)")
	pf.StringVar(&o.Topic, "topic", "bench", "topic (created on first send)")
	pf.IntVar(&o.Size, "size", 128, "bytes per message body")
	pf.Int64Var(&o.Messages, "messages", 500_000, "messages")
	pf.IntVar(&o.BrokerPID, "broker-pid", 0, "the broker's pid, to report its CPU and RSS")
	produce := &cobra.Command{Use: "produce", Short: "Concurrent sync senders",
		RunE: func(c *cobra.Command, _ []string) error {
			produce := bench.RocketMQProduce
			if o.Raw {
				produce = bench.RocketMQProduceRaw
			}
			r, err := produce(c.Context(), o)
			if err != nil {
				return err
			}
			r.Print(c.OutOrStdout())
			return nil
		}}
	produce.Flags().IntVar(&o.Senders, "senders", 64, "concurrent sync senders")
	pf.BoolVar(&o.Raw, "raw", false, "produce, e2e: a lean pipelined sender instead of the Go client (the broker's capacity when the client is the bottleneck)")
	pf.IntVar(&o.Connections, "connections", 4, "--raw: connections")
	pf.IntVar(&o.Inflight, "inflight", 64, "--raw: requests in flight per connection")
	consume := &cobra.Command{Use: "consume", Short: "Push consumer reading a topic from the start", RunE: runReport(&o, bench.RocketMQConsume)}
	e2e := &cobra.Command{Use: "e2e", Short: "End-to-end latency at a fixed rate (async sends, push consumer)", RunE: runReport(&o, bench.RocketMQE2E)}
	e2e.Flags().IntVar(&o.Rate, "rate", 5000, "messages per second")
	cmd.AddCommand(produce, consume, e2e)
	return cmd
}

func grpcBenchCmd() *cobra.Command {
	var o bench.GRPCOptions
	cmd := &cobra.Command{Use: "grpc", Short: "RocketMQ 5 gRPC workloads driven with rocketmq-clients/golang/v5 against a running node"}
	pf := cmd.PersistentFlags()
	pf.StringVar(&o.Endpoint, "endpoint", "127.0.0.1:8081", "gRPC endpoint")
	pf.StringVar(&o.Topic, "topic", "bench-grpc", "topic (created on first use)")
	pf.StringVar(&o.Group, "group", "bench-grpc-group", "consumer group")
	pf.IntVar(&o.Size, "size", 128, "bytes per message body")
	pf.Int64Var(&o.Messages, "messages", 200_000, "messages")
	pf.IntVar(&o.BrokerPID, "broker-pid", 0, "the broker's pid, to report its CPU and RSS")
	pf.BoolVar(&o.TLS, "tls", false, "connect with TLS (the RocketMQ 5 clients' default)")
	send := &cobra.Command{Use: "send", Short: "Concurrent sync senders (v5 producer)", RunE: runReport(&o, bench.GRPCSend)}
	send.Flags().IntVar(&o.Senders, "senders", 64, "concurrent sync senders")
	receive := &cobra.Command{Use: "receive", Short: "SimpleConsumers receiving and acknowledging what the topic holds", RunE: runReport(&o, bench.GRPCReceive)}
	receive.Flags().IntVar(&o.Receivers, "receivers", 4, "SimpleConsumer loops")
	receive.Flags().Int32Var(&o.Batch, "batch", 32, "messages per receive")
	receive.Flags().IntVar(&o.AckInflight, "ack-inflight", 1, "acks of a batch one loop has in flight at once (1: one after another)")
	var so bench.GRPCStubOptions
	var listen string
	stub := &cobra.Command{Use: "stub-server", Short: "A RocketMQ 5 gRPC service that stores nothing and answers at once: what the client's calls cost grpc-go, to compare a broker with",
		RunE: func(c *cobra.Command, _ []string) error {
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "stub RocketMQ 5 gRPC service on %s\n", l.Addr())
			return bench.GRPCStubServe(c.Context(), l, so)
		}}
	stub.Flags().StringVar(&listen, "listen", "127.0.0.1:8091", "address to serve on")
	stub.Flags().IntVar(&so.Size, "size", 128, "bytes per message body handed out")
	stub.Flags().BoolVar(&so.Tuned, "tuned", true, "serve with the broker's grpc-go options (false: grpc-go's defaults)")
	cmd.AddCommand(send, receive, stub)
	return cmd
}

func pulsarBenchCmd() *cobra.Command {
	var o bench.PulsarOptions
	cmd := &cobra.Command{Use: "pulsar", Short: "Pulsar workloads driven with pulsar-client-go against a running node"}
	pf := cmd.PersistentFlags()
	pf.StringVar(&o.URL, "url", "pulsar://127.0.0.1:6650", "service URL")
	pf.StringVar(&o.Topic, "topic", "bench-pulsar", "topic (created on first use)")
	pf.IntVar(&o.Size, "size", 100, "bytes per message")
	pf.Int64Var(&o.Messages, "messages", 1_000_000, "messages")
	pf.StringVar(&o.Compression, "compression", "none", "producer compression: none, lz4, zstd")
	pf.IntVar(&o.MaxPending, "max-pending", 10_000, "producer's messages in flight")
	pf.IntVar(&o.BrokerPID, "broker-pid", 0, "the broker's pid, to report its CPU and RSS")
	produce := &cobra.Command{Use: "produce", Short: "Async producer with batching", RunE: runReport(&o, bench.PulsarProduce)}
	consume := &cobra.Command{Use: "consume", Short: "One consumer reading the topic from the start", RunE: runReport(&o, bench.PulsarConsume)}
	consume.Flags().BoolVar(&o.Shared, "shared", false, "a Shared subscription (POP) instead of Exclusive")
	consume.Flags().StringVar(&o.Subscription, "subscription", "", "subscription name (default: a new one)")
	e2e := &cobra.Command{Use: "e2e", Short: "End-to-end latency at a fixed rate", RunE: runReport(&o, bench.PulsarE2E)}
	e2e.Flags().IntVar(&o.Rate, "rate", 5000, "messages per second")
	cmd.AddCommand(produce, consume, e2e)
	return cmd
}

func mqttBenchCmd() *cobra.Command {
	var o bench.MQTTOptions
	var qos int
	cmd := &cobra.Command{Use: "mqtt", Short: "MQTT workloads driven with paho.mqtt.golang (3.1.1) against a running node (or mosquitto, as a yardstick)"}
	pf := cmd.PersistentFlags()
	pf.StringVar(&o.Broker, "broker", "tcp://127.0.0.1:1883", "broker address")
	pf.StringVar(&o.Topic, "topic", "bench", "topic prefix (the first level: a Rosetta topic)")
	pf.IntVar(&o.Size, "size", 100, "bytes per message")
	pf.Int64Var(&o.Messages, "messages", 200_000, "messages")
	pf.IntVar(&qos, "qos", 1, "QoS of publishes and subscriptions")
	pf.IntVar(&o.BrokerPID, "broker-pid", 0, "the broker's pid, to report its CPU and RSS")
	set := func(fn func(context.Context, bench.MQTTOptions) (*bench.Report, error)) func(*cobra.Command, []string) error {
		return func(c *cobra.Command, args []string) error {
			o.QoS = byte(qos)
			return runReport(&o, fn)(c, args)
		}
	}
	publish := &cobra.Command{Use: "publish", Short: "Publishers with a window of publishes in flight", RunE: set(bench.MQTTPublish)}
	publish.Flags().IntVar(&o.Publishers, "publishers", 4, "publishing clients")
	publish.Flags().IntVar(&o.Window, "window", 64, "a publisher's publishes in flight")
	fanout := &cobra.Command{Use: "fanout", Short: "One publisher, many subscribers each getting every message", RunE: set(bench.MQTTFanout)}
	fanout.Flags().IntVar(&o.Subscribers, "subscribers", 1000, "subscribers")
	fanout.Flags().IntVar(&o.Rate, "rate", 0, "messages per second (0: as fast as they go)")
	idle := &cobra.Command{Use: "idle", Short: "Idle connections: the broker's memory per connection", RunE: set(bench.MQTTIdle)}
	idle.Flags().IntVar(&o.Connections, "connections", 10_000, "connections")
	cmd.AddCommand(publish, fanout, idle)
	return cmd
}

// runReport runs a workload with the options the flags filled and prints
// its report.
func runReport[O any](o *O, fn func(context.Context, O) (*bench.Report, error)) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, _ []string) error {
		r, err := fn(c.Context(), *o)
		if err != nil {
			return err
		}
		r.Print(c.OutOrStdout())
		return nil
	}
}
