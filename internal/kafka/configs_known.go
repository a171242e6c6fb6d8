package kafka

import (
	"math"
	"strconv"
	"strings"
)

// unenforcedConfigs are the Kafka topic configs Rosetta accepts, validates
// as Kafka would and stores, but does not act on (see docs/compat/kafka.md):
// settings of Kafka's per-partition log files, replication and tiering,
// which have no meaning on the shared commit log or a single node, and
// compaction tuning until compaction lands.
var unenforcedConfigs = map[string]func(string) bool{
	"compression.type":                        oneOf("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
	"compression.gzip.level":                  intIn(-1, 9),
	"compression.lz4.level":                   intIn(1, 17),
	"compression.zstd.level":                  intIn(-131072, 22),
	"delete.retention.ms":                     longIn(0, math.MaxInt64),
	"file.delete.delay.ms":                    longIn(0, math.MaxInt64),
	"flush.messages":                          longIn(1, math.MaxInt64),
	"flush.ms":                                longIn(0, math.MaxInt64),
	"follower.replication.throttled.replicas": anyString,
	"leader.replication.throttled.replicas":   anyString,
	"index.interval.bytes":                    intIn(0, math.MaxInt32),
	"local.retention.bytes":                   longIn(-2, math.MaxInt64),
	"local.retention.ms":                      longIn(-2, math.MaxInt64),
	"max.compaction.lag.ms":                   longIn(1, math.MaxInt64),
	"message.downconversion.enable":           boolean,
	"message.format.version":                  anyString,
	"message.timestamp.after.max.ms":          longIn(0, math.MaxInt64),
	"message.timestamp.before.max.ms":         longIn(0, math.MaxInt64),
	"message.timestamp.difference.max.ms":     longIn(0, math.MaxInt64),
	"min.cleanable.dirty.ratio":               doubleIn(0, 1),
	"min.compaction.lag.ms":                   longIn(0, math.MaxInt64),
	"min.insync.replicas":                     intIn(1, math.MaxInt32),
	"preallocate":                             boolean,
	"remote.log.copy.disable":                 boolean,
	"remote.log.delete.on.disable":            boolean,
	"segment.bytes":                           intIn(14, math.MaxInt32),
	"segment.index.bytes":                     intIn(4, math.MaxInt32),
	"segment.jitter.ms":                       longIn(0, math.MaxInt64),
	"segment.ms":                              longIn(1, math.MaxInt64),
	"unclean.leader.election.enable":          boolean,
}

func anyString(string) bool { return true }

func boolean(v string) bool {
	v = strings.TrimSpace(v)
	return strings.EqualFold(v, "true") || strings.EqualFold(v, "false")
}

func longIn(lo, hi int64) func(string) bool {
	return func(v string) bool {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		return err == nil && n >= lo && n <= hi
	}
}

func intIn(lo, hi int64) func(string) bool {
	return func(v string) bool {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
		return err == nil && n >= lo && n <= hi
	}
}

func doubleIn(lo, hi float64) func(string) bool {
	return func(v string) bool {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		return err == nil && f >= lo && f <= hi
	}
}

func oneOf(vals ...string) func(string) bool {
	return func(v string) bool {
		for _, x := range vals {
			if v == x {
				return true
			}
		}
		return false
	}
}
