package kafka

// Group configs (the GROUP config resource, type 32; KIP-848 and KIP-932):
// per-group settings read with DescribeConfigs and written with
// IncrementalAlterConfigs or AlterConfigs, kept in the group's stored
// configuration (broker.GroupConfig attributes, the metadata store: shared
// by every member of a cluster) beside its RocketMQ settings. A group need
// not exist to be configured. Values are checked as Kafka checks them:
// known names only, within the broker's bounds, a session timeout above the
// heartbeat interval; a bad one is refused with INVALID_CONFIG.

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker"
)

// Group config names.
const (
	GroupConsumerSessionTimeout   = "consumer.session.timeout.ms"
	GroupConsumerHeartbeat        = "consumer.heartbeat.interval.ms"
	GroupShareSessionTimeout      = "share.session.timeout.ms"
	GroupShareHeartbeat           = "share.heartbeat.interval.ms"
	GroupShareRecordLockDuration  = "share.record.lock.duration.ms"
	GroupShareDeliveryCountLimit  = "share.delivery.count.limit"
	GroupSharePartitionMaxLocks   = "share.partition.max.record.locks"
	GroupShareAutoOffsetReset     = "share.auto.offset.reset"
	GroupShareIsolationLevel      = "share.isolation.level"
	GroupShareRenewAcknowledgment = "share.renew.acknowledge.enable"
)

// groupConfigKey is one group config: its type, default and bounds.
type groupConfigKey struct {
	name     string
	ctype    kmsg.ConfigType
	def      string
	min, max int64             // ints: the broker's bounds
	check    func(string) bool // strings and booleans
}

// groupConfigKeys are the group configs in the order DescribeConfigs lists
// them; consumerDefaults are the coordinator's (the broker's
// group_consumer_* settings), which widen Kafka's bounds when outside them.
func groupConfigKeys(consumerSession, consumerHeartbeat time.Duration) []groupConfigKey {
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	cs, ch := ms(consumerSession), ms(consumerHeartbeat)
	return []groupConfigKey{
		{name: GroupConsumerHeartbeat, ctype: kmsg.ConfigTypeInt, def: strconv.FormatInt(ch, 10), min: min(5000, ch), max: max(15000, ch)},
		{name: GroupConsumerSessionTimeout, ctype: kmsg.ConfigTypeInt, def: strconv.FormatInt(cs, 10), min: min(45000, cs), max: max(60000, cs)},
		{name: GroupShareAutoOffsetReset, ctype: kmsg.ConfigTypeString, def: "latest", check: validShareReset},
		{name: GroupShareDeliveryCountLimit, ctype: kmsg.ConfigTypeInt, def: "5", min: 2, max: 10},
		{name: GroupShareHeartbeat, ctype: kmsg.ConfigTypeInt, def: "5000", min: 5000, max: 15000},
		{name: GroupShareIsolationLevel, ctype: kmsg.ConfigTypeString, def: "read_uncommitted",
			check: func(v string) bool { return v == "read_uncommitted" || v == "read_committed" }},
		{name: GroupSharePartitionMaxLocks, ctype: kmsg.ConfigTypeInt, def: "2000", min: 100, max: 10000},
		{name: GroupShareRecordLockDuration, ctype: kmsg.ConfigTypeInt, def: "30000", min: 15000, max: 60000},
		{name: GroupShareRenewAcknowledgment, ctype: kmsg.ConfigTypeBoolean, def: "true",
			check: func(v string) bool { return v == "true" || v == "false" }},
		{name: GroupShareSessionTimeout, ctype: kmsg.ConfigTypeInt, def: "45000", min: 45000, max: 60000},
	}
}

// isoDuration is an ISO 8601 duration without years and months
// (PnDTnHnMn.nS), as share.auto.offset.reset's by_duration takes it.
var isoDuration = regexp.MustCompile(`^P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d+)?S)?)?$`)

// validShareReset checks a share.auto.offset.reset value.
func validShareReset(v string) bool {
	if v == "latest" || v == "earliest" {
		return true
	}
	d, ok := strings.CutPrefix(v, "by_duration:")
	return ok && d != "P" && d != "PT" && !strings.HasSuffix(d, "T") && isoDuration.MatchString(d)
}

// groupConfigs are the keys this server's groups use.
func (s *Server) groupConfigKeys() []groupConfigKey {
	session, heartbeat := 45*time.Second, 5*time.Second
	if be := s.any(); be != nil && be.groups != nil {
		session, heartbeat = be.groups.ConsumerDefaults()
	}
	return groupConfigKeys(session, heartbeat)
}

// describeGroupConfigs lists a group's configs: every known one, those it
// sets with the GROUP_CONFIG source.
func (s *Server) describeGroupConfigs(group string, names []string) []kmsg.DescribeConfigsResponseResourceConfig {
	cfg, _ := s.cat().GroupConfig(group)
	var out []kmsg.DescribeConfigsResponseResourceConfig
	for _, k := range s.groupConfigKeys() {
		if len(names) > 0 && !slices.Contains(names, k.name) {
			continue
		}
		e := kmsg.NewDescribeConfigsResponseResourceConfig()
		e.Name, e.ConfigType = k.name, k.ctype
		v, set := cfg.Attributes[k.name]
		if !set {
			v = k.def
		}
		e.Value = &v
		e.IsDefault, e.Source = !set, kmsg.ConfigSourceDefaultConfig
		if set {
			e.Source = kmsg.ConfigSourceGroupConfig
		}
		out = append(out, e)
	}
	return out
}

// alterGroupConfigs applies change to a copy of a group's Kafka configs,
// checks the result and stores it unless validateOnly.
func (s *Server) alterGroupConfigs(rc *reqCtx, group string, validateOnly bool, change func(map[string]string) error) error {
	if group == "" {
		return &kafkaCodeError{code: kerr.InvalidRequest.Code, msg: "a group config resource needs a group name"}
	}
	b := s.cat()
	cfg, _ := b.GroupConfig(group)
	attrs := map[string]string{}
	for k, v := range cfg.Attributes {
		attrs[k] = v
	}
	if err := change(attrs); err != nil {
		return err
	}
	if err := s.checkGroupConfigs(attrs); err != nil {
		return err
	}
	if validateOnly {
		return nil
	}
	cfg.Attributes = attrs
	if len(cfg.Attributes) == 0 {
		cfg.Attributes = nil
	}
	return b.SetGroupConfig(rc.ctx(), cfg)
}

// checkGroupConfigs checks a group's configs as Kafka does.
func (s *Server) checkGroupConfigs(attrs map[string]string) error {
	keys := s.groupConfigKeys()
	value := func(name string) int64 {
		for _, k := range keys {
			if k.name == name {
				v, ok := attrs[name]
				if !ok {
					v = k.def
				}
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return 0
	}
	for name, v := range attrs {
		i := slices.IndexFunc(keys, func(k groupConfigKey) bool { return k.name == name })
		if i < 0 {
			return invalidGroupConfig("unknown group config name: %s", name)
		}
		k := keys[i]
		if k.ctype != kmsg.ConfigTypeInt {
			if !k.check(v) {
				return invalidGroupConfig("invalid value %q for group config %s", v, name)
			}
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
		switch {
		case err != nil:
			return invalidGroupConfig("invalid value %q for group config %s: not an integer", v, name)
		case n < k.min:
			return invalidGroupConfig("%s must be greater than or equal to %d", name, k.min)
		case n > k.max:
			return invalidGroupConfig("%s must be less than or equal to %d", name, k.max)
		}
	}
	if value(GroupConsumerSessionTimeout) <= value(GroupConsumerHeartbeat) {
		return invalidGroupConfig("%s must be greater than %s", GroupConsumerSessionTimeout, GroupConsumerHeartbeat)
	}
	if value(GroupShareSessionTimeout) <= value(GroupShareHeartbeat) {
		return invalidGroupConfig("%s must be greater than %s", GroupShareSessionTimeout, GroupShareHeartbeat)
	}
	return nil
}

func invalidGroupConfig(format string, args ...any) error {
	return &kafkaCodeError{code: kerr.InvalidConfig.Code, msg: fmt.Sprintf(format, args...)}
}

// GroupConsumerTimeouts are a group's own consumer.session.timeout.ms and
// consumer.heartbeat.interval.ms (zero where its config sets none): the
// group coordinator's groups.Options.ConsumerTimeouts.
func GroupConsumerTimeouts(b *broker.Broker) func(group string) (session, heartbeat time.Duration) {
	return groupTimeouts(b, GroupConsumerSessionTimeout, GroupConsumerHeartbeat)
}

// GroupShareTimeouts are a group's own share.session.timeout.ms and
// share.heartbeat.interval.ms: groups.Options.ShareTimeouts.
func GroupShareTimeouts(b *broker.Broker) func(group string) (session, heartbeat time.Duration) {
	return groupTimeouts(b, GroupShareSessionTimeout, GroupShareHeartbeat)
}

func groupTimeouts(b *broker.Broker, sessionKey, heartbeatKey string) func(group string) (session, heartbeat time.Duration) {
	return func(group string) (session, heartbeat time.Duration) {
		cfg, ok := b.GroupConfig(group)
		if !ok {
			return 0, 0
		}
		return groupMillis(cfg.Attributes, sessionKey), groupMillis(cfg.Attributes, heartbeatKey)
	}
}

// groupMillis is a group config in milliseconds (0 when unset or bad).
func groupMillis(attrs map[string]string, name string) time.Duration {
	n, err := strconv.ParseInt(attrs[name], 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Millisecond
}

// shareSettings are a share group's record settings (its group configs or
// Kafka's defaults).
type shareSettings struct {
	lock          time.Duration
	deliveryLimit int32
	maxLocks      int
	reset         string // latest, earliest or by_duration:<ISO 8601>
	committed     bool   // share.isolation.level=read_committed
	renew         bool   // share.renew.acknowledge.enable: RENEW acknowledgements allowed
}

// shareSettingsOf reads a share group's settings.
func shareSettingsOf(b *broker.Broker, group string) shareSettings {
	out := shareSettings{lock: 30 * time.Second, deliveryLimit: 5, maxLocks: 2000, reset: "latest", renew: true}
	cfg, ok := b.GroupConfig(group)
	if !ok {
		return out
	}
	a := cfg.Attributes
	if d := groupMillis(a, GroupShareRecordLockDuration); d > 0 {
		out.lock = d
	}
	if n, err := strconv.Atoi(a[GroupShareDeliveryCountLimit]); err == nil && n > 0 {
		out.deliveryLimit = int32(n)
	}
	if n, err := strconv.Atoi(a[GroupSharePartitionMaxLocks]); err == nil && n > 0 {
		out.maxLocks = n
	}
	if v := a[GroupShareAutoOffsetReset]; v != "" {
		out.reset = v
	}
	out.committed = a[GroupShareIsolationLevel] == "read_committed"
	out.renew = a[GroupShareRenewAcknowledgment] != "false"
	return out
}

// parseISODuration reads a validShareReset duration (PnDTnHnMn.nS).
func parseISODuration(v string) (time.Duration, bool) {
	if !isoDuration.MatchString(v) {
		return 0, false
	}
	var total time.Duration
	num := ""
	inTime := false
	for _, c := range v[1:] {
		switch {
		case c == 'T':
			inTime = true
		case c >= '0' && c <= '9' || c == '.':
			num += string(c)
		default:
			f, err := strconv.ParseFloat(num, 64)
			if err != nil {
				return 0, false
			}
			unit := time.Second
			switch {
			case c == 'D':
				unit = 24 * time.Hour
			case c == 'H':
				unit = time.Hour
			case c == 'M' && inTime:
				unit = time.Minute
			}
			total += time.Duration(f * float64(unit))
			num = ""
		}
	}
	return total, true
}
