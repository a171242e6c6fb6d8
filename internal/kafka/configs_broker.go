package kafka

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/model"
)

// brokerConfigKey is one of Kafka's dynamically updatable broker configs
// (KIP-226): its type, Kafka's default (empty: none), whether only a node
// may set it (listener and security settings) rather than the cluster-wide
// default, and its value check.
type brokerConfigKey struct {
	ctype     kmsg.ConfigType
	def       string
	perBroker bool
	check     func(string) bool
}

var (
	clusterLong = func(def string, lo int64) brokerConfigKey {
		return brokerConfigKey{ctype: kmsg.ConfigTypeLong, def: def, check: longIn(lo, math.MaxInt64)}
	}
	clusterInt = func(def string, lo int64) brokerConfigKey {
		return brokerConfigKey{ctype: kmsg.ConfigTypeInt, def: def, check: intIn(lo, math.MaxInt32)}
	}
	clusterDouble = func(def string, lo, hi float64) brokerConfigKey {
		return brokerConfigKey{ctype: kmsg.ConfigTypeDouble, def: def, check: doubleIn(lo, hi)}
	}
	clusterBool = func(def string) brokerConfigKey {
		return brokerConfigKey{ctype: kmsg.ConfigTypeBoolean, def: def, check: boolean}
	}
	nodeString = func(def string) brokerConfigKey {
		return brokerConfigKey{ctype: kmsg.ConfigTypeString, def: def, perBroker: true, check: anyString}
	}
	nodeList = func(def string) brokerConfigKey {
		return brokerConfigKey{ctype: kmsg.ConfigTypeList, def: def, perBroker: true, check: anyString}
	}
	nodePassword = brokerConfigKey{ctype: kmsg.ConfigTypePassword, perBroker: true, check: anyString}
)

// dynamicBrokerConfigs are the broker configs AlterConfigs and
// IncrementalAlterConfigs may change, as in Kafka. log.retention.* and
// log.retention.bytes act on the broker's default retention; the others
// are validated, stored and described.
var dynamicBrokerConfigs = map[string]brokerConfigKey{
	"log.retention.ms":                          {ctype: kmsg.ConfigTypeLong, check: longIn(-1, math.MaxInt64)},
	"log.retention.minutes":                     {ctype: kmsg.ConfigTypeInt, check: intIn(-1, math.MaxInt32)},
	"log.retention.hours":                       {ctype: kmsg.ConfigTypeInt, def: "168", check: intIn(-1, math.MaxInt32)},
	"log.retention.bytes":                       clusterLong("-1", -1),
	"log.segment.bytes":                         clusterInt("1073741824", 14),
	"log.roll.ms":                               {ctype: kmsg.ConfigTypeLong, check: longIn(1, math.MaxInt64)},
	"log.roll.hours":                            clusterInt("168", 1),
	"log.cleanup.policy":                        {ctype: kmsg.ConfigTypeList, def: "delete", check: listOf("delete", "compact")},
	"log.cleaner.threads":                       clusterInt("1", 0),
	"log.cleaner.io.max.bytes.per.second":       clusterDouble("1.7976931348623157E308", 0, math.MaxFloat64),
	"log.cleaner.dedupe.buffer.size":            clusterLong("134217728", 0),
	"log.cleaner.io.buffer.size":                clusterInt("524288", 0),
	"log.cleaner.io.buffer.load.factor":         clusterDouble("0.9", 0, math.MaxFloat64),
	"log.cleaner.backoff.ms":                    clusterLong("15000", 0),
	"log.cleaner.min.compaction.lag.ms":         clusterLong("0", 0),
	"log.cleaner.max.compaction.lag.ms":         clusterLong("9223372036854775807", 1),
	"log.cleaner.delete.retention.ms":           clusterLong("86400000", 0),
	"log.cleaner.min.cleanable.ratio":           clusterDouble("0.5", 0, 1),
	"log.index.size.max.bytes":                  clusterInt("10485760", 4),
	"log.index.interval.bytes":                  clusterInt("4096", 0),
	"log.flush.interval.messages":               clusterLong("9223372036854775807", 1),
	"log.flush.interval.ms":                     {ctype: kmsg.ConfigTypeLong, check: longIn(0, math.MaxInt64)},
	"log.message.timestamp.type":                {ctype: kmsg.ConfigTypeString, def: "CreateTime", check: oneOf("CreateTime", "LogAppendTime")},
	"log.message.timestamp.before.max.ms":       clusterLong("9223372036854775807", 0),
	"log.message.timestamp.after.max.ms":        clusterLong("3600000", 0),
	"log.preallocate":                           clusterBool("false"),
	"log.segment.delete.delay.ms":               clusterLong("60000", 0),
	"log.local.retention.ms":                    clusterLong("-2", -2),
	"log.local.retention.bytes":                 clusterLong("-2", -2),
	"message.max.bytes":                         clusterInt("1048588", 0),
	"min.insync.replicas":                       clusterInt("1", 1),
	"compression.type":                          {ctype: kmsg.ConfigTypeString, def: "producer", check: oneOf("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")},
	"unclean.leader.election.enable":            clusterBool("false"),
	"num.io.threads":                            clusterInt("8", 1),
	"num.network.threads":                       clusterInt("3", 1),
	"num.replica.fetchers":                      clusterInt("1", 1),
	"num.recovery.threads.per.data.dir":         clusterInt("2", 1),
	"background.threads":                        clusterInt("10", 1),
	"max.connections":                           clusterInt("2147483647", 0),
	"max.connections.per.ip":                    clusterInt("2147483647", 0),
	"max.connections.per.ip.overrides":          {ctype: kmsg.ConfigTypeString, check: anyString},
	"max.connection.creation.rate":              clusterInt("2147483647", 0),
	"producer.id.expiration.ms":                 clusterInt("86400000", 1),
	"transaction.partition.verification.enable": clusterBool("true"),
	"leader.replication.throttled.rate":         clusterLong("9223372036854775807", 0),
	"follower.replication.throttled.rate":       clusterLong("9223372036854775807", 0),
	"listeners":                                 nodeString("PLAINTEXT://:9092"),
	"advertised.listeners":                      nodeString(""),
	"listener.security.protocol.map":            nodeString("PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"),
	"ssl.keystore.type":                         nodeString("JKS"),
	"ssl.keystore.location":                     nodeString(""),
	"ssl.keystore.password":                     nodePassword,
	"ssl.key.password":                          nodePassword,
	"ssl.truststore.type":                       nodeString("JKS"),
	"ssl.truststore.location":                   nodeString(""),
	"ssl.truststore.password":                   nodePassword,
	"ssl.client.auth":                           {ctype: kmsg.ConfigTypeString, def: "none", perBroker: true, check: oneOf("required", "requested", "none")},
	"ssl.enabled.protocols":                     nodeList("TLSv1.2,TLSv1.3"),
	"ssl.cipher.suites":                         nodeList(""),
	"ssl.endpoint.identification.algorithm":     nodeString("https"),
	"sasl.enabled.mechanisms":                   nodeList("GSSAPI"),
	"sasl.jaas.config":                          nodePassword,
	"sasl.kerberos.service.name":                nodeString(""),
	"sasl.kerberos.kinit.cmd":                   nodeString("/usr/bin/kinit"),
	"sasl.kerberos.min.time.before.relogin":     {ctype: kmsg.ConfigTypeLong, def: "60000", perBroker: true, check: longIn(0, math.MaxInt64)},
	"sasl.kerberos.ticket.renew.jitter":         {ctype: kmsg.ConfigTypeDouble, def: "0.05", perBroker: true, check: doubleIn(0, math.MaxFloat64)},
	"sasl.kerberos.ticket.renew.window.factor":  {ctype: kmsg.ConfigTypeDouble, def: "0.8", perBroker: true, check: doubleIn(0, math.MaxFloat64)},
	"sasl.kerberos.principal.to.local.rules":    nodeList("DEFAULT"),
	"sasl.login.refresh.window.factor":          {ctype: kmsg.ConfigTypeDouble, def: "0.8", perBroker: true, check: doubleIn(0.5, 1)},
	"sasl.login.refresh.window.jitter":          {ctype: kmsg.ConfigTypeDouble, def: "0.05", perBroker: true, check: doubleIn(0, 0.25)},
	"sasl.login.refresh.min.period.seconds":     {ctype: kmsg.ConfigTypeShort, def: "60", perBroker: true, check: intIn(0, 900)},
	"sasl.login.refresh.buffer.seconds":         {ctype: kmsg.ConfigTypeShort, def: "300", perBroker: true, check: intIn(0, 3600)},
}

// readOnlyBrokerConfigs are broker configs Kafka does not let change while
// the broker runs.
var readOnlyBrokerConfigs = map[string]bool{
	"broker.id": true, "node.id": true, "num.partitions": true, "auto.create.topics.enable": true,
	"default.replication.factor": true, "log.dirs": true, "log.dir": true, "process.roles": true,
	"offsets.topic.num.partitions": true, "transaction.state.log.num.partitions": true,
	"delete.topic.enable": true, "auto.leader.rebalance.enable": true, "group.initial.rebalance.delay.ms": true,
	"controller.quorum.voters": true, "controller.listener.names": true, "zookeeper.connect": true,
}

func listOf(vals ...string) func(string) bool {
	one := oneOf(vals...)
	return func(v string) bool {
		for _, item := range strings.Split(v, ",") {
			if !one(strings.TrimSpace(item)) {
				return false
			}
		}
		return true
	}
}

// brokerResource checks a BROKER resource name: this node's id, or empty
// for the cluster-wide default.
func (s *Server) brokerResource(name string) error {
	if name == "" || name == strconv.Itoa(int(s.opts.NodeID)) {
		return nil
	}
	return &kafkaCodeError{code: kerr.InvalidRequest.Code,
		msg: fmt.Sprintf("unexpected broker id, expected %d or empty string, but received %s", s.opts.NodeID, name)}
}

// validateBrokerConfigs checks a resource's would-be dynamic configs as
// Kafka does: no read-only config, node-only configs only on a node,
// values of the config's type and range.
func validateBrokerConfigs(resource string, cfg map[string]string) error {
	var readOnly, nodeOnly []string
	for name, v := range cfg {
		if readOnlyBrokerConfigs[name] {
			readOnly = append(readOnly, name)
			continue
		}
		k, known := dynamicBrokerConfigs[name]
		if !known {
			continue // kept as given, as Kafka keeps custom keys
		}
		if k.perBroker && resource == "" {
			nodeOnly = append(nodeOnly, name)
			continue
		}
		if !k.check(v) {
			return &kafkaCodeError{code: kerr.InvalidConfig.Code, msg: fmt.Sprintf("invalid value %s for configuration %s", v, name)}
		}
	}
	sort.Strings(readOnly)
	sort.Strings(nodeOnly)
	switch {
	case len(readOnly) > 0:
		return &kafkaCodeError{code: kerr.InvalidRequest.Code, msg: fmt.Sprintf("cannot update these configs dynamically: %v", readOnly)}
	case len(nodeOnly) > 0:
		return &kafkaCodeError{code: kerr.InvalidRequest.Code,
			msg: fmt.Sprintf("cannot update these configs at default cluster level, broker id must be specified: %v", nodeOnly)}
	}
	return nil
}

// alterBrokerConfigs applies change to a copy of a BROKER resource's
// dynamic configs, validates and stores them unless validateOnly.
func (s *Server) alterBrokerConfigs(rc *reqCtx, resource string, validateOnly bool, change func(cur map[string]string) error) error {
	if err := s.brokerResource(resource); err != nil {
		return err
	}
	cfg := s.cat().BrokerConfigs(resource)
	if cfg == nil {
		cfg = map[string]string{}
	}
	if err := change(cfg); err != nil {
		return err
	}
	if err := validateBrokerConfigs(resource, cfg); err != nil {
		return err
	}
	if validateOnly {
		return nil
	}
	return s.cat().SetBrokerConfigs(rc.ctx(), resource, cfg)
}

// brokerListValue is the list a broker config APPEND or SUBTRACT starts
// from: the resource's dynamic value, else the default in effect.
func (s *Server) brokerListValue(resource string, cur map[string]string, name string) string {
	if v, ok := cur[name]; ok {
		return v
	}
	if resource != "" {
		if v, _, ok := s.cat().DynamicBrokerConfig(model.NodeID(s.opts.NodeID), name); ok {
			return v
		}
	}
	return dynamicBrokerConfigs[name].def
}

// describeBrokerConfigs lists a BROKER resource's configs with their
// sources: for the cluster-wide default, the dynamic defaults set; for this
// node, its static settings and every dynamic config, from the most
// specific level that sets it (synonyms list every level when asked).
func (s *Server) describeBrokerConfigs(resource string, names []string, synonyms bool) []kmsg.DescribeConfigsResponseResourceConfig {
	want := func(name string) bool { return len(names) == 0 || contains(names, name) }
	entry := func(name, value string, src kmsg.ConfigSource, ctype kmsg.ConfigType, readOnly bool) kmsg.DescribeConfigsResponseResourceConfig {
		e := kmsg.NewDescribeConfigsResponseResourceConfig()
		e.Name, e.Source, e.ConfigType, e.ReadOnly = name, src, ctype, readOnly
		e.IsDefault = src == kmsg.ConfigSourceDefaultConfig
		e.IsSensitive = ctype == kmsg.ConfigTypePassword
		if value != "" && !e.IsSensitive {
			v := value
			e.Value = &v
		}
		return e
	}
	var out []kmsg.DescribeConfigsResponseResourceConfig
	defaults := s.cat().BrokerConfigs("")
	if resource == "" {
		for _, name := range sortedKeys(defaults) {
			if want(name) {
				out = append(out, entry(name, defaults[name], kmsg.ConfigSourceDynamicDefaultBrokerConfig, dynamicBrokerConfigs[name].ctype, false))
			}
		}
		return out
	}
	retention, bytes := s.cat().StaticRetentionDefaults()
	static := map[string]string{
		"broker.id":                  strconv.Itoa(int(s.opts.NodeID)),
		"message.max.bytes":          strconv.Itoa(int(s.opts.MaxFrameBytes)),
		"num.partitions":             strconv.Itoa(s.cat().DefaultQueues()),
		"auto.create.topics.enable":  strconv.FormatBool(s.cat().AutoCreateTopics()),
		"default.replication.factor": "1",
	}
	staticTypes := map[string]kmsg.ConfigType{"broker.id": kmsg.ConfigTypeInt, "message.max.bytes": kmsg.ConfigTypeInt,
		"num.partitions": kmsg.ConfigTypeInt, "auto.create.topics.enable": kmsg.ConfigTypeBoolean, "default.replication.factor": kmsg.ConfigTypeShort}
	own := s.cat().BrokerConfigs(resource)
	seen := map[string]bool{}
	add := func(name string, ctype kmsg.ConfigType) {
		if seen[name] || !want(name) {
			return
		}
		seen[name] = true
		var levels []kmsg.DescribeConfigsResponseResourceConfig
		if v, ok := own[name]; ok {
			levels = append(levels, entry(name, v, kmsg.ConfigSourceDynamicBrokerConfig, ctype, false))
		}
		if v, ok := defaults[name]; ok {
			levels = append(levels, entry(name, v, kmsg.ConfigSourceDynamicDefaultBrokerConfig, ctype, false))
		}
		if v, ok := static[name]; ok {
			levels = append(levels, entry(name, v, kmsg.ConfigSourceStaticBrokerConfig, ctype, readOnlyBrokerConfigs[name]))
		}
		if k, ok := dynamicBrokerConfigs[name]; ok {
			levels = append(levels, entry(name, k.def, kmsg.ConfigSourceDefaultConfig, ctype, false))
		}
		if len(levels) == 0 {
			return
		}
		e := levels[0]
		if synonyms {
			for _, l := range levels {
				syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
				syn.Name, syn.Value, syn.Source = l.Name, l.Value, l.Source
				e.ConfigSynonyms = append(e.ConfigSynonyms, syn)
			}
		}
		out = append(out, e)
	}
	// The node's own retention settings, as Kafka's static ones.
	if retention > 0 {
		static["log.retention.ms"] = strconv.FormatInt(retention.Milliseconds(), 10)
	}
	if bytes > 0 {
		static["log.retention.bytes"] = strconv.FormatInt(bytes, 10)
	}
	for _, name := range sortedKeys(static) {
		ctype, ok := staticTypes[name]
		if !ok {
			ctype = dynamicBrokerConfigs[name].ctype
		}
		add(name, ctype)
	}
	for _, name := range sortedKeys(dynamicBrokerConfigs) {
		add(name, dynamicBrokerConfigs[name].ctype)
	}
	for _, m := range []map[string]string{own, defaults} {
		for _, name := range sortedKeys(m) {
			add(name, kmsg.ConfigTypeString) // custom keys
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
