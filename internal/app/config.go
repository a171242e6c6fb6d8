package app

import (
	"crypto/tls"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/kafka"
	"github.com/rosettamq/rosetta/internal/member/directory"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/tlsmux"
)

// ByteSize is a size in bytes that also parses "64MiB", "1GiB", "512k".
type ByteSize int64

// ParseByteSize parses a byte size with an optional unit (k, KiB, KB, M, MiB,
// MB, G, GiB, GB, T, TiB, TB; all powers of 1024).
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') {
		i--
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(t[:i]), 64)
	if err != nil {
		return 0, fmt.Errorf("%w: byte size %q", model.ErrInvalidConfig, s)
	}
	mult := map[string]float64{"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
		"g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}[strings.ToLower(strings.TrimSpace(t[i:]))]
	if mult == 0 {
		return 0, fmt.Errorf("%w: byte size unit in %q", model.ErrInvalidConfig, s)
	}
	return ByteSize(n * mult), nil
}

func (b ByteSize) String() string {
	for _, u := range []struct {
		n    int64
		name string
	}{{1 << 40, "TiB"}, {1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if int64(b) >= u.n && int64(b)%u.n == 0 {
			return fmt.Sprintf("%d%s", int64(b)/u.n, u.name)
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// UnmarshalYAML accepts numbers and strings with units.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseByteSize(n.Value)
	*b = v
	return err
}

// Config is the whole configuration tree. Every leaf is a knob: settable in
// the YAML file by its path, by an environment variable ROSETTA_<PATH> and by
// the flag --<path>, in that order of precedence (flags win).
type Config struct {
	DataDir         string          `yaml:"data_dir" help:"directory for all data (commit log, indexes, metadata)"`
	NodeID          int             `yaml:"node_id" help:"this node's id (1 on a single node)"`
	Log             LogConfig       `yaml:"log"`
	Listen          ListenConfig    `yaml:"listen"`
	TLS             TLSConfig       `yaml:"tls"`
	Security        SecurityConfig  `yaml:"security"`
	Storage         StorageConfig   `yaml:"storage"`
	Broker          BrokerConfig    `yaml:"broker"`
	Limits          LimitsConfig    `yaml:"limits"`
	Cluster         ClusterConfig   `yaml:"cluster"`
	Telemetry       TelemetryConfig `yaml:"telemetry"`
	MQTT            MQTTConfig      `yaml:"mqtt"`
	ShutdownTimeout time.Duration   `yaml:"shutdown_timeout" help:"how long a graceful shutdown may take"`
	GCPercent       int             `yaml:"gc_percent" help:"Go garbage collector target (GOGC) set by rosetta serve; 0: 400 on a single node (less collection per message), 100 on a cluster member (a leader's replication copies large batches, and a smaller heap keeps that memory warm); the GOGC environment variable wins when set"`
	MemoryLimit     ByteSize        `yaml:"memory_limit" help:"soft limit on the Go heap (GOMEMLIMIT) set by rosetta serve: near it the collector runs more often, so request floods cannot grow the heap to gc_percent times what is live; 0: automatic, twice the live heap and at least the live heap + 128MiB, followed as the live heap changes; the GOMEMLIMIT environment variable wins when set (GOMEMLIMIT=off: none)"`

	// Hooks inject faults in tests; never set from a file, the environment
	// or flags.
	Hooks Hooks `yaml:"-"`
}

// Hooks are fault-injection points for tests.
type Hooks struct {
	// AfterSync runs after each commit-log fsync, before the appends it made
	// durable are acknowledged (a slow disk: written, durable, not yet
	// acknowledged).
	AfterSync func()
}

// MQTTConfig configures the MQTT front-end (docs/compat/mqtt.md).
type MQTTConfig struct {
	TopicLevels      int           `yaml:"topic_levels" help:"how many leading levels of an MQTT topic name the Rosetta topic it is stored in: 1 stores sensors/a/temp in the topic sensors; 0 stores every MQTT topic in mqtt.default_topic"`
	DefaultTopic     string        `yaml:"default_topic" help:"the Rosetta topic of MQTT topic names whose leading levels make no topic name ($SYS/..., an empty level, characters Kafka topics cannot hold)"`
	MaxPacketSize    ByteSize      `yaml:"max_packet_size" help:"largest MQTT packet a client may send (MQTT 5 clients are told)"`
	MaxInflight      int           `yaml:"max_inflight" help:"QoS 1 and 2 messages sent to a client and not yet acknowledged, at most (an MQTT 5 client's receive maximum when lower)"`
	MaxSessionExpiry time.Duration `yaml:"max_session_expiry" help:"longest a session outlives its connection (3.1.1 sessions without clean session keep it; MQTT 5 session expiry intervals are capped by it)"`
}

// TelemetryConfig configures OpenTelemetry spans.
type TelemetryConfig struct {
	OTLPEndpoint string        `yaml:"otlp_endpoint" help:"OTLP/HTTP collector URL (http://host:4318) the broker sends produce, send and fetch spans to, joining clients' traces through W3C traceparent headers and properties; empty: none"`
	SampleRatio  float64       `yaml:"sample_ratio" help:"share of the traces the broker itself starts that are recorded (0..1); traces a client started follow the client's sampling"`
	BatchTimeout time.Duration `yaml:"batch_timeout" help:"longest spans wait before they are sent together"`
}

// LogConfig configures logging.
type LogConfig struct {
	Level  string `yaml:"level" help:"debug, info, warn or error"`
	Format string `yaml:"format" help:"text or json"`
}

// ListenConfig holds listener addresses; an empty address disables one.
type ListenConfig struct {
	Host string `yaml:"host" help:"host every listener address without one binds to (and routes name), e.g. 127.0.0.11 for one node of a cluster on one machine; empty: every address of the machine"`

	HTTP               string `yaml:"http" help:"admin HTTP address: /metrics, /healthz, /debug/pprof"`
	Kafka              string `yaml:"kafka" help:"Kafka protocol address"`
	KafkaAdvertised    string `yaml:"kafka_advertised" help:"host:port Kafka clients are told to connect to (default: the listener's)"`
	Remoting           string `yaml:"remoting" help:"RocketMQ remoting (name server and broker) address"`
	RemotingAdvertised string `yaml:"remoting_advertised" help:"host:port RocketMQ routes point clients at (default: the address each client connected to)"`
	GRPC               string `yaml:"grpc" help:"RocketMQ 5 gRPC address"`
	GRPCAdvertised     string `yaml:"grpc_advertised" help:"host:port gRPC routes point clients at (default: the address each client connected to)"`
	GRPCTLS            string `yaml:"grpc_tls" help:"gRPC TLS: permissive (TLS and plaintext on one port, as RocketMQ's proxy), enforcing (TLS only) or disabled"`
	Pulsar             string `yaml:"pulsar" help:"Pulsar binary protocol address (pulsar-client-go, the Java client)"`
	PulsarAdvertised   string `yaml:"pulsar_advertised" help:"host:port Pulsar lookups name (default: the address each client connected to)"`
	PulsarTLS          string `yaml:"pulsar_tls" help:"Pulsar listener TLS (pulsar+ssl:// clients): permissive, enforcing or disabled"`
	PulsarSSL          string `yaml:"pulsar_ssl" help:"Pulsar TLS-only address (pulsar+ssl://, Pulsar's 6651), served when TLS is not disabled"`
	MQTT               string `yaml:"mqtt" help:"MQTT 3.1, 3.1.1 and 5.0 address (tcp://; ssl:// too when mqtt_tls is permissive)"`
	MQTTTLS            string `yaml:"mqtt_tls" help:"MQTT listener TLS: permissive, enforcing or disabled"`
	MQTTSSL            string `yaml:"mqtt_ssl" help:"MQTT TLS-only address (ssl://, MQTT's 8883), served when TLS is not disabled"`
	KafkaTLS           string `yaml:"kafka_tls" help:"Kafka listener TLS (security.protocol=SSL clients): permissive, enforcing or disabled"`
	RemotingTLS        string `yaml:"remoting_tls" help:"RocketMQ remoting TLS (clients' WithTls): permissive, enforcing or disabled"`
	// RemotingReadLinger batches the requests of busy remoting connections.
	RemotingReadLinger time.Duration `yaml:"remoting_read_linger" help:"how long a busy RocketMQ remoting connection (many synchronous senders) waits for more requests before reading, so one wake-up reads several; used only while it does not slow the client down; 0: never"`
	HTTPTLS            string        `yaml:"http_tls" help:"admin HTTP(S) TLS: permissive, enforcing or disabled"`

	KafkaListeners           string `yaml:"kafka_listeners" help:"named Kafka listeners as Kafka's listeners: NAME://host:port,… with NAME PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL or one mapped in kafka_protocol_map; when set, replaces listen.kafka"`
	KafkaProtocolMap         string `yaml:"kafka_protocol_map" help:"NAME:PROTOCOL,… for listener names that are not protocols (Kafka listener.security.protocol.map)"`
	KafkaAdvertisedListeners string `yaml:"kafka_advertised_listeners" help:"NAME://host:port,… told to clients of each named listener (Kafka advertised.listeners)"`
}

// TLSConfig names the certificate TLS listeners serve.
type TLSConfig struct {
	CertFile string `yaml:"cert_file" help:"PEM certificate (chain) for TLS listeners; re-read when it changes. Empty: a self-signed certificate made at start"`
	KeyFile  string `yaml:"key_file" help:"PEM private key of tls.cert_file"`
	// Mutual TLS.
	ClientAuth   string `yaml:"client_auth" help:"client certificates on TLS listeners: none, request (verified when given) or require; a verified Kafka client's principal is User:<subject DN>"`
	ClientCAFile string `yaml:"client_ca_file" help:"PEM CA certificates that sign accepted client certificates"`
}

// SecurityConfig configures authentication and authorization.
type SecurityConfig struct {
	Authorization          bool          `yaml:"authorization" help:"check ACLs on every request of every protocol; off, every client may do everything"`
	SuperUsers             string        `yaml:"super_users" help:"semicolon-separated principals allowed everything (Kafka super.users), e.g. User:admin"`
	AllowIfNoACL           bool          `yaml:"allow_everyone_if_no_acl_found" help:"allow an operation on a resource no ACL names (Kafka allow.everyone.if.no.acl.found)"`
	RemotingAuthentication bool          `yaml:"remoting_authentication" help:"require every RocketMQ remoting request to be signed with a user's access key (RocketMQ ACL AccessKey/Signature)"`
	MQTTAuthentication     bool          `yaml:"mqtt_authentication" help:"require MQTT clients to give a user name and password (a user's) or a verified client certificate at CONNECT"`
	PulsarAuthentication   bool          `yaml:"pulsar_authentication" help:"require Pulsar clients to authenticate at CONNECT (token: a JWT the node signed; basic: a user's name:password; tls: a verified client certificate)"`
	GRPCAuthentication     bool          `yaml:"grpc_authentication" help:"require every RocketMQ 5 gRPC request to carry a signed authorization header (MQv2-HMAC-SHA1)"`
	SASLMechanisms         string        `yaml:"sasl_mechanisms" help:"comma-separated SASL mechanisms Kafka SASL listeners offer: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER"`
	MaxReauth              time.Duration `yaml:"max_reauth" help:"longest a Kafka SASL session lasts before the client must re-authenticate (Kafka connections.max.reauth.ms; 0: no limit)"`
	AuthTimeout            time.Duration `yaml:"auth_timeout" help:"close connections that have not authenticated within this time"`
	MaxUnauthenticated     int           `yaml:"max_unauthenticated_connections" help:"connections allowed at once that have not yet authenticated (0: no limit)"`
	FailureDelay           time.Duration `yaml:"failure_delay" help:"delay before answering a failed authentication, doubled per recent failure from the same source up to 5s (Kafka connection.failed.authentication.delay.ms)"`
	KeyFile                string        `yaml:"key_file" help:"node key file that encrypts stored signing secrets (default: <data_dir>/security.key, created when missing)"`
	JWTHMACSecret          string        `yaml:"jwt_hmac_secret" secret:"true" help:"HS256 key (at least 32 bytes) of JWTs accepted as Kafka OAUTHBEARER tokens and RocketMQ access keys"`
	JWTPublicKeyFile       string        `yaml:"jwt_public_key_file" help:"PEM RSA public key of RS256 JWTs accepted as tokens"`
	JWTIssuer              string        `yaml:"jwt_issuer" help:"required iss claim of tokens (empty: any)"`
	JWTAudience            string        `yaml:"jwt_audience" help:"required aud claim of tokens (empty: any)"`
	JWTPrincipalClaim      string        `yaml:"jwt_principal_claim" help:"claim naming a token's user"`
}

// StorageConfig configures the storage engine.
type StorageConfig struct {
	Durability         string        `yaml:"durability" help:"sync (acknowledge after fsync, group commit) or async (fsync every flush_interval)"`
	FlushInterval      time.Duration `yaml:"flush_interval" help:"async mode: fsync interval"`
	SegmentSize        ByteSize      `yaml:"segment_size" help:"commit-log segment file size"`
	MaxRecordSize      ByteSize      `yaml:"max_record_size" help:"largest record (message or batch) accepted"`
	CheckpointInterval time.Duration `yaml:"checkpoint_interval" help:"how often index state is checkpointed (bounds recovery time)"`
	RetentionTime      time.Duration `yaml:"retention_time" help:"deprecated: sets broker.retention when positive"`
	RetentionBytes     ByteSize      `yaml:"retention_bytes" help:"last-resort guard: past this many commit-log bytes the oldest segments are cut whatever they hold (0: no limit); per-topic retention is the normal way to bound data"`
	GCMinorThreshold   float64       `yaml:"gc_minor_threshold" help:"garbage collection: a sealed segment less live than this fraction is relocated by the frequent pass"`
	GCMajorThreshold   float64       `yaml:"gc_major_threshold" help:"garbage collection: a sealed segment less live than this fraction is relocated by the rarer pass, and by the frequent one once such segments hold two segments' worth of dead bytes"`
	GCMinorInterval    time.Duration `yaml:"gc_minor_interval" help:"garbage collection: how often the frequent pass runs (negative: never)"`
	GCMajorInterval    time.Duration `yaml:"gc_major_interval" help:"garbage collection: how often the rarer pass runs (negative: never)"`
	GCBytesPerSecond   ByteSize      `yaml:"gc_bytes_per_second" help:"garbage collection: most bytes copied per second while producers write (0: unpaced; unpaced anyway while appends are under 1 MiB/s)"`
	MinFreeBytes       ByteSize      `yaml:"min_free_bytes" help:"refuse writes when free disk space falls below this"`
	MinFreeRatio       float64       `yaml:"min_free_ratio" help:"or below this fraction of the disk"`
	VerifyReads        bool          `yaml:"verify_reads" help:"check each record's CRC32C when it is read"`
	MaxOpenIndexFiles  int           `yaml:"max_open_index_files" help:"queue index files kept open at once"`
	Tier               TierConfig    `yaml:"tier"`
	// StatDisk, when set, stands in for the file system's total and free
	// bytes in the disk guard (an embedder's own quota; tests).
	StatDisk func() (total, free int64, err error) `yaml:"-"`
}

// BrokerConfig configures the broker core.
type BrokerConfig struct {
	AutoCreateTopics  bool `yaml:"auto_create_topics" help:"create unknown topics on first use"`
	DefaultQueues     int  `yaml:"default_queues" help:"queues (partitions) of an auto-created topic"`
	MaxQueuesPerTopic int  `yaml:"max_queues_per_topic" help:"upper bound on a topic's queue count"`

	MessageTraceAll       bool          `yaml:"message_trace_all" help:"record the lifecycle of every topic's messages (otherwise only topics whose message_trace config is on: rosetta.message.trace=true)"`
	MessageTraceSample    float64       `yaml:"message_trace_sample" help:"share of traced topics' messages whose lifecycle is recorded (0 or 1: all), chosen by message id"`
	MessageTraceRetention time.Duration `yaml:"message_trace_retention" help:"how long recorded lifecycle events are kept"`

	ProducerIDExpiration time.Duration `yaml:"producer_id_expiration" help:"forget an idempotent producer's sequence state after this long without a write (Kafka producer.id.expiration.ms)"`
	MaxProducerStates    int           `yaml:"max_producer_states" help:"bound on idempotent (producer, partition) states held; past it the least recently used are forgotten"`

	GroupMinSessionTimeout time.Duration `yaml:"group_min_session_timeout" help:"shortest consumer group session timeout a member may ask for (Kafka group.min.session.timeout.ms)"`
	GroupMaxSessionTimeout time.Duration `yaml:"group_max_session_timeout" help:"longest consumer group session timeout a member may ask for (Kafka group.max.session.timeout.ms)"`

	Retention      time.Duration `yaml:"retention" help:"how long a topic keeps messages unless its retention.ms says otherwise (Kafka log.retention.ms; 0 keeps them forever)"`
	RetentionBytes ByteSize      `yaml:"retention_bytes" help:"most bytes a queue (partition) keeps unless its topic's retention.bytes says otherwise (0: no limit)"`

	MaxTimerDelay time.Duration `yaml:"max_timer_delay" help:"longest a timer message (TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS) may wait; later delivery times are refused"`
	DelayLevels   string        `yaml:"delay_levels" help:"RocketMQ delay levels 1, 2, ...: space-separated durations with a unit of s, m, h or d (RocketMQ messageDelayLevel)"`

	TransactionTimeout       time.Duration `yaml:"transaction_timeout" help:"age of a RocketMQ transactional half message before the broker asks its producer group (RocketMQ transactionTimeOut)"`
	TransactionCheckInterval time.Duration `yaml:"transaction_check_interval" help:"time between two checks of one pending RocketMQ transactional message (RocketMQ transactionCheckInterval)"`
	TransactionMaxTimeout    time.Duration `yaml:"transaction_max_timeout" help:"longest transaction timeout a Kafka transactional producer may ask for (Kafka transaction.max.timeout.ms)"`
	TransactionCheckMax      int           `yaml:"transaction_check_max" help:"checks of a pending RocketMQ transactional message before it is moved to TRANS_CHECK_MAX_TIME_TOPIC (RocketMQ transactionCheckMax)"`

	GroupConsumerSessionTimeout    time.Duration `yaml:"group_consumer_session_timeout" help:"session timeout of consumer-protocol (KIP-848) group members (Kafka group.consumer.session.timeout.ms)"`
	GroupConsumerHeartbeatInterval time.Duration `yaml:"group_consumer_heartbeat_interval" help:"heartbeat interval told to stable consumer-protocol (KIP-848) group members (Kafka group.consumer.heartbeat.interval.ms); a tenth of it while a group reconciles"`

	StateSnapshotInterval time.Duration `yaml:"state_snapshot_interval" help:"how often the internal state queues (consumer offsets, transactions, POP) are checked for a snapshot that lets their older records go, and POP progress is committed as group offsets"`
}

// ClusterConfig places the node's metadata in a cluster's etcd (empty: the
// node keeps its own store).
type ClusterConfig struct {
	EtcdEndpoints     string        `yaml:"etcd_endpoints" help:"comma-separated client URLs of an etcd holding the metadata instead of the node's own store (with cluster.members: instead of the members' embedded etcd); without cluster.members, data is not replicated, so a cluster name serves one node"`
	Name              string        `yaml:"name" help:"cluster name: its metadata lives under /rosetta/<name>/ in etcd"`
	NodeID            int           `yaml:"node_id" help:"this node's id in cluster.members (same as node_id; Kafka broker id)"`
	Members           string        `yaml:"members" help:"the cluster's members as id=host,…, e.g. 1=127.0.0.11,2=127.0.0.12,3=127.0.0.13: the first five run an etcd member for the metadata (unless cluster.etcd_endpoints is set), the others are its clients; each holds replicas of the commit log, replicated with Raft; every listener defaults to the member's own host"`
	NodeIDFromHost    bool          `yaml:"node_id_from_hostname" help:"take node_id from the host name (HOSTNAME, a pod's name): a StatefulSet's pod <name>-<n> is node n+1; a protocol-only node's id is a hash of its name, from 1000000 up"`
	Join              string        `yaml:"join" help:"comma-separated admin API URLs of running members: a member not in cluster.members (a StatefulSet scaled up) asks one of them to add it (cluster member add, its listen.host) before it starts"`
	Roles             string        `yaml:"roles" help:"what this node is: member (default: replicas, and etcd on the first five), or protocol: a protocol-only node serving clients for the members of cluster.members (needs a node_id of its own and listen.host; holds no data), each listener's connections relayed to its group's leader, RocketMQ routes naming the protocol-only nodes"`
	RaftPort          int           `yaml:"raft_port" help:"port of the replication transport on every member's host"`
	EtcdPort          int           `yaml:"etcd_port" help:"client port of the embedded etcd member on every member's host (its peer port is the next one)"`
	Secret            string        `yaml:"secret" secret:"true" help:"shared secret the members authenticate one another's replication connections with (each end answers the other's challenge with an HMAC); empty: none"`
	TLS               bool          `yaml:"tls" help:"encrypt replication connections with TLS 1.3 (needs cluster.secret, whose proofs are bound to each TLS session, so no certificate authority is needed)"`
	Groups            int           `yaml:"groups" help:"replication groups the queues spread over (queue i of a topic in group i mod groups), each led by one member and seen by RocketMQ clients as one broker (name <cluster.name>-<group>; group g's RocketMQ listeners on the remoting and gRPC ports + g); fixed when the cluster is made; 0 (default): as the cluster was made, and for a new cluster one group per member (a leader each, spread over the members). Kafka partition p is queue p, in group p mod groups; consumer groups and transactional ids are coordinated by the leader of the group their id hashes to"`
	ReplicationFactor int           `yaml:"replication_factor" help:"copies of each queue (Kafka partition) on a cluster of more members: groups other than group 0 get that many members as voters, group 0 keeps every member; 1, 3 or 5 (an even factor survives no more failures than the odd one below it); fixed when the cluster is made; 0 (default): as the cluster was made, 3 for a new cluster"`
	BalanceQueues     time.Duration `yaml:"balance_queues" help:"every this long, group 0's leader moves one queue (rosetta topic move) from the group holding the most queues to the group of the same replication factor holding the fewest, when they differ by two or more, so the groups' leaders carry even shares; 0 (default): off"`
	LeaderAck         bool          `yaml:"leader_ack" help:"answer Kafka acks=1 produces once the leader wrote them, before a majority has them (faster; a leader's failure can lose what it acknowledged); off: acks=1 waits for the commit like acks=all"`
}

// maxGroups bounds cluster.groups.
const maxGroups = 16

// groups is the number of replication groups (at least one).
func (c ClusterConfig) groups() int { return max(c.Groups, 1) }

// members parses cluster.members (nil when unset).
func (c ClusterConfig) members() (map[model.NodeID]string, error) {
	return directory.ParseMembers(c.Members)
}

// LimitsConfig bounds what clients may make the broker hold.
type LimitsConfig struct {
	MaxFrameBytes      ByteSize `yaml:"max_frame_bytes" help:"largest request frame accepted on any protocol"`
	MaxInflightPerConn int      `yaml:"max_inflight_per_conn" help:"requests in flight per connection"`
	MaxBytesInFlight   ByteSize `yaml:"max_bytes_in_flight" help:"request bytes held by the whole broker at once"`
}

// DefaultConfig is the embedded single-node default: data in ./data, every
// listener on its standard port.
func DefaultConfig() Config {
	return Config{
		DataDir: "./data",
		NodeID:  1,
		Log:     LogConfig{Level: "info", Format: "text"},
		Listen: ListenConfig{HTTP: ":8080", Kafka: ":9092", Remoting: ":9876", GRPC: ":8081", Pulsar: ":6650", PulsarSSL: ":6651", GRPCTLS: "permissive", PulsarTLS: "permissive",
			MQTT: ":1883", MQTTSSL: ":8883", MQTTTLS: "permissive",
			KafkaTLS: "permissive", RemotingTLS: "permissive", HTTPTLS: "permissive", RemotingReadLinger: 300 * time.Microsecond},
		Storage: StorageConfig{
			Durability:         "sync",
			FlushInterval:      200 * time.Millisecond,
			SegmentSize:        1 << 30,
			MaxRecordSize:      16 << 20,
			CheckpointInterval: 5 * time.Second,
			GCMinorThreshold:   0.2,
			GCMajorThreshold:   0.5,
			GCMinorInterval:    time.Minute,
			GCMajorInterval:    30 * time.Minute,
			GCBytesPerSecond:   4 << 20,
			MinFreeBytes:       1 << 30,
			MinFreeRatio:       0.05,
			VerifyReads:        true,
			MaxOpenIndexFiles:  2048,
			Tier:               defaultTierConfig(),
		},
		Broker: BrokerConfig{AutoCreateTopics: true, DefaultQueues: 8, MaxQueuesPerTopic: 10000, Retention: 7 * 24 * time.Hour,
			MessageTraceSample: 1, MessageTraceRetention: 3 * 24 * time.Hour,
			ProducerIDExpiration: 24 * time.Hour, MaxProducerStates: 500_000,
			GroupMinSessionTimeout: 6 * time.Second, GroupMaxSessionTimeout: 30 * time.Minute,
			GroupConsumerSessionTimeout: 45 * time.Second, GroupConsumerHeartbeatInterval: 2 * time.Second,
			MaxTimerDelay:      40 * 24 * time.Hour,
			TransactionTimeout: 6 * time.Second, TransactionCheckInterval: 30 * time.Second, TransactionCheckMax: 15,
			TransactionMaxTimeout: 15 * time.Minute, StateSnapshotInterval: 30 * time.Second,
			DelayLevels: "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"},
		Security: SecurityConfig{SASLMechanisms: "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", AuthTimeout: 10 * time.Second,
			MaxUnauthenticated: 1000, FailureDelay: 100 * time.Millisecond, JWTPrincipalClaim: "sub"},
		Limits:          LimitsConfig{MaxFrameBytes: 100 << 20, MaxInflightPerConn: 64, MaxBytesInFlight: 512 << 20},
		Cluster:         ClusterConfig{Name: "rosetta", RaftPort: 9393, EtcdPort: 2379},
		Telemetry:       TelemetryConfig{SampleRatio: 1, BatchTimeout: 5 * time.Second},
		MQTT:            MQTTConfig{TopicLevels: 1, DefaultTopic: "mqtt", MaxPacketSize: 1 << 20, MaxInflight: 64, MaxSessionExpiry: 24 * time.Hour},
		ShutdownTimeout: 5 * time.Second,
		GCPercent:       0,
	}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	bad := func(f string, a ...any) error {
		return fmt.Errorf("%w: "+f, append([]any{model.ErrInvalidConfig}, a...)...)
	}
	switch {
	case c.DataDir == "":
		return bad("data_dir is empty")
	case c.NodeID <= 0:
		return bad("node_id must be positive")
	case c.Storage.Durability != "sync" && c.Storage.Durability != "async":
		return bad("storage.durability %q: want sync or async", c.Storage.Durability)
	case c.Storage.SegmentSize < 1<<20:
		return bad("storage.segment_size %v below 1MiB", c.Storage.SegmentSize)
	case c.Storage.MaxRecordSize <= 0 || int64(c.Storage.MaxRecordSize) > int64(c.Storage.SegmentSize)/2:
		return bad("storage.max_record_size %v must be positive and at most half a segment", c.Storage.MaxRecordSize)
	case c.Log.Format != "text" && c.Log.Format != "json":
		return bad("log.format %q: want text or json", c.Log.Format)
	case c.Broker.DefaultQueues <= 0 || c.Broker.DefaultQueues > c.Broker.MaxQueuesPerTopic:
		return bad("broker.default_queues %d", c.Broker.DefaultQueues)
	case c.Broker.MessageTraceSample < 0 || c.Broker.MessageTraceSample > 1:
		return bad("broker.message_trace_sample %v: want 0..1", c.Broker.MessageTraceSample)
	case c.Limits.MaxFrameBytes <= 0 || c.Limits.MaxInflightPerConn <= 0 || c.Limits.MaxBytesInFlight < c.Limits.MaxFrameBytes:
		return bad("limits: frames, in-flight requests and bytes must be positive, bytes in flight >= max frame")
	case c.Broker.GroupMinSessionTimeout <= 0 || c.Broker.GroupMaxSessionTimeout < c.Broker.GroupMinSessionTimeout:
		return bad("broker.group_min_session_timeout must be positive and at most broker.group_max_session_timeout")
	case c.Broker.GroupConsumerHeartbeatInterval <= 0 || c.Broker.GroupConsumerSessionTimeout <= c.Broker.GroupConsumerHeartbeatInterval:
		return bad("broker.group_consumer_heartbeat_interval must be positive and below broker.group_consumer_session_timeout")
	case c.Broker.ProducerIDExpiration <= 0 || c.Broker.MaxProducerStates <= 0:
		return bad("broker.producer_id_expiration and broker.max_producer_states must be positive")
	case c.GCPercent < 0 && c.GCPercent != -1:
		return bad("gc_percent %d: want a positive percentage, or -1 (off)", c.GCPercent)
	case c.Broker.MaxTimerDelay <= 0:
		return bad("broker.max_timer_delay must be positive")
	case !validClusterName(c.Cluster.Name):
		return bad("cluster.name %q: want letters, digits, '.', '_' or '-'", c.Cluster.Name)
	case c.Cluster.TLS && c.Cluster.Secret == "":
		return bad("cluster.tls needs cluster.secret (it authenticates the members)")
	case c.Cluster.NodeID != 0 && c.Cluster.NodeID != c.NodeID:
		return bad("cluster.node_id %d differs from node_id %d", c.Cluster.NodeID, c.NodeID)
	case c.Cluster.Members != "" && (c.Cluster.RaftPort <= 0 || c.Cluster.RaftPort > 65535 || c.Cluster.EtcdPort <= 0 || c.Cluster.EtcdPort >= 65535):
		return bad("cluster.raft_port and cluster.etcd_port must be ports")
	case c.Cluster.Roles != "" && c.Cluster.Roles != "member" && c.Cluster.Roles != roleProtocol:
		return bad("cluster.roles %q: want member or protocol", c.Cluster.Roles)
	case c.protocolNode() && c.Cluster.Members == "":
		return bad("cluster.roles protocol needs cluster.members (where the cluster's etcd and groups are)")
	case c.protocolNode() && c.Listen.Host == "":
		return bad("cluster.roles protocol needs listen.host (the members know its connections by it)")
	case c.protocolNode() && c.NodeID > kafka.MaxProxyNodeID:
		return bad("a protocol-only node's id is at most %d (Kafka clients see it as %d brokers, one per group)", kafka.MaxProxyNodeID, kafka.GroupSpan)
	case c.Cluster.Groups < 0 || c.Cluster.Groups > maxGroups:
		return bad("cluster.groups %d: want 1 to %d", c.Cluster.Groups, maxGroups)
	case c.Cluster.ReplicationFactor != 0 && c.Cluster.ReplicationFactor != 1 && c.Cluster.ReplicationFactor != 3 && c.Cluster.ReplicationFactor != 5:
		return bad("cluster.replication_factor %d: want 1, 3 or 5 (an even factor survives no more failures than the odd one below it)", c.Cluster.ReplicationFactor)
	case c.Cluster.Groups > 1 && c.Cluster.Members == "":
		return bad("cluster.groups needs cluster.members (groups are replicated over the members)")
	case c.Broker.StateSnapshotInterval <= 0:
		return bad("broker.state_snapshot_interval must be positive")
	case c.Broker.TransactionTimeout <= 0 || c.Broker.TransactionCheckInterval <= 0 || c.Broker.TransactionCheckMax <= 0 || c.Broker.TransactionMaxTimeout <= 0:
		return bad("broker.transaction_timeout, broker.transaction_check_interval and broker.transaction_check_max and broker.transaction_max_timeout must be positive")
	case c.ShutdownTimeout <= 0:
		return bad("shutdown_timeout must be positive")
	case c.Storage.Tier.validate() != nil:
		return c.Storage.Tier.validate()
	case c.Storage.GCMinorThreshold <= 0 || c.Storage.GCMinorThreshold > 1 || c.Storage.GCMajorThreshold <= 0 || c.Storage.GCMajorThreshold > 1 || c.Storage.GCBytesPerSecond < 0:
		return bad("storage.gc_minor_threshold and gc_major_threshold must be in (0, 1], gc_bytes_per_second not negative")
	case c.Broker.Retention < 0 || c.Broker.RetentionBytes < 0:
		return bad("broker.retention and broker.retention_bytes must not be negative (0: unlimited)")
	case c.Telemetry.SampleRatio < 0 || c.Telemetry.SampleRatio > 1:
		return bad("telemetry.sample_ratio must be in [0, 1]")
	}
	if m, err := c.Cluster.members(); err != nil {
		return err
	} else if m != nil && m[model.NodeID(c.NodeID)] == "" && !c.protocolNode() && (c.Cluster.Join == "" || c.Listen.Host == "") {
		return bad("node %d is not one of cluster.members (a member joining a running cluster: cluster.join and listen.host)", c.NodeID)
	} else if m[model.NodeID(c.NodeID)] != "" && c.protocolNode() {
		return bad("node %d is a member in cluster.members; a protocol-only node needs a node_id of its own", c.NodeID)
	}
	if c.MQTT.TopicLevels < 0 {
		return bad("mqtt.topic_levels: %d (0 or more)", c.MQTT.TopicLevels)
	}
	if _, err := model.ParseTopicName(c.MQTT.DefaultTopic); err != nil {
		return bad("mqtt.default_topic: %v", err)
	}
	if c.MQTT.MaxPacketSize < 64 || c.MQTT.MaxPacketSize > 256<<20 {
		return bad("mqtt.max_packet_size: %d (64 B to 256 MiB)", c.MQTT.MaxPacketSize)
	}
	for name, m := range map[string]string{"grpc_tls": c.Listen.GRPCTLS, "kafka_tls": c.Listen.KafkaTLS, "remoting_tls": c.Listen.RemotingTLS, "http_tls": c.Listen.HTTPTLS, "pulsar_tls": c.Listen.PulsarTLS, "mqtt_tls": c.Listen.MQTTTLS} {
		if _, err := tlsmux.ParseMode(m); err != nil {
			return bad("listen.%s: %v", name, err)
		}
	}
	if c.Listen.KafkaListeners != "" {
		if _, _, err := kafka.ParseListeners(c.Listen.KafkaListeners, c.Listen.KafkaProtocolMap, c.Listen.KafkaAdvertisedListeners); err != nil {
			return bad("listen.kafka_listeners: %v", err)
		}
	}
	if s := c.Security.JWTHMACSecret; s != "" && len(s) < 32 {
		return bad("security.jwt_hmac_secret must have at least 32 bytes")
	}
	if c.Security.AuthTimeout <= 0 || c.Security.MaxUnauthenticated < 0 || c.Security.FailureDelay < 0 || c.Security.MaxReauth < 0 {
		return bad("security.auth_timeout must be positive; max_unauthenticated_connections, failure_delay and max_reauth not negative")
	}
	if err := tlsmux.WithClientAuth(&tls.Config{}, c.TLS.ClientAuth, c.TLS.ClientCAFile); err != nil {
		return bad("tls: %v", err)
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		return bad("tls.cert_file and tls.key_file go together")
	}
	if _, err := parseLevel(c.Log.Level); err != nil {
		return err
	}
	if _, err := broker.ParseDelayLevels(c.Broker.DelayLevels); err != nil {
		return err
	}
	return nil
}

// Knob is one configuration leaf.
type Knob struct {
	Path   string // dotted YAML path, also the flag name
	Env    string
	Help   string
	Secret bool // never printed
	Bool   bool // a switch: its flag alone means true
	field  func(c *Config) reflect.Value
}

// Get renders the knob's value in c.
func (k Knob) Get(c *Config) string {
	v := k.field(c)
	if k.Secret && !v.IsZero() {
		return "<redacted>"
	}
	if d, ok := v.Interface().(time.Duration); ok {
		return d.String()
	}
	return fmt.Sprint(v.Interface())
}

// Set parses s into the knob's field in c.
func (k Knob) Set(c *Config, s string) error {
	v := k.field(c)
	var err error
	switch v.Interface().(type) {
	case string:
		v.SetString(s)
	case bool:
		var b bool
		b, err = strconv.ParseBool(s)
		v.SetBool(b)
	case int:
		var n int64
		n, err = strconv.ParseInt(s, 10, 0)
		v.SetInt(n)
	case float64:
		var f float64
		f, err = strconv.ParseFloat(s, 64)
		v.SetFloat(f)
	case time.Duration:
		var d time.Duration
		d, err = time.ParseDuration(s)
		v.SetInt(int64(d))
	case ByteSize:
		var b ByteSize
		b, err = ParseByteSize(s)
		v.SetInt(int64(b))
	default:
		err = fmt.Errorf("unsupported knob type %s", v.Type())
	}
	if err != nil {
		return fmt.Errorf("%w: %s=%q: %v", model.ErrInvalidConfig, k.Path, s, err)
	}
	return nil
}

// Knobs lists every configuration leaf, sorted by path.
func Knobs() []Knob {
	var out []Knob
	var walk func(t reflect.Type, prefix string, idx []int)
	walk = func(t reflect.Type, prefix string, idx []int) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name := strings.Split(f.Tag.Get("yaml"), ",")[0]
			if name == "-" {
				continue
			}
			path := prefix + name
			fi := append(append([]int(nil), idx...), i)
			if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Duration(0)) {
				walk(f.Type, path+".", fi)
				continue
			}
			out = append(out, Knob{
				Path:   path,
				Env:    "ROSETTA_" + strings.ToUpper(strings.ReplaceAll(path, ".", "_")),
				Help:   f.Tag.Get("help"),
				Secret: f.Tag.Get("secret") == "true",
				Bool:   f.Type.Kind() == reflect.Bool,
				field:  func(c *Config) reflect.Value { return reflect.ValueOf(c).Elem().FieldByIndex(fi) },
			})
		}
	}
	walk(reflect.TypeOf(Config{}), "", nil)
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// LoadConfig builds the configuration: defaults, then the YAML file (if
// path is not empty), then ROSETTA_* environment variables, then the flag
// values in overrides (path → value).
func LoadConfig(path string, environ []string, overrides map[string]string) (Config, error) {
	c := DefaultConfig()
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("read config: %w", err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil && err.Error() != "EOF" {
			return c, fmt.Errorf("%w: %s: %v", model.ErrInvalidConfig, path, err)
		}
	}
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	for _, k := range Knobs() {
		if v, ok := env[k.Env]; ok {
			if err := k.Set(&c, v); err != nil {
				return c, err
			}
		}
		if v, ok := overrides[k.Path]; ok {
			if err := k.Set(&c, v); err != nil {
				return c, err
			}
		}
	}
	c = c.withCluster()
	c.Listen = c.Listen.withHost()
	return c, c.Validate()
}

// withCluster applies cluster.node_id, and makes a member's own host the
// default host of its listeners.
func (c Config) withCluster() Config {
	if c.Cluster.NodeIDFromHost {
		h := os.Getenv("HOSTNAME") // a pod's name
		if h == "" {
			h, _ = os.Hostname()
		}
		if id, ok := hostOrdinal(h); ok && !c.protocolNode() {
			c.Cluster.NodeID = id + 1
		} else if c.protocolNode() && h != "" {
			// A Deployment's pods have no ordinal: a protocol-only node
			// takes an id from its name, far above the members'.
			f := fnv.New32a()
			f.Write([]byte(h))
			c.Cluster.NodeID = 1_000_000 + int(f.Sum32()%(kafka.MaxProxyNodeID-1_000_000))
		}
	}
	if c.Cluster.NodeID > 0 {
		c.NodeID = c.Cluster.NodeID
	}
	if m, err := c.Cluster.members(); err == nil && c.Listen.Host == "" && !c.protocolNode() {
		c.Listen.Host = m[model.NodeID(c.NodeID)]
	}
	return c
}

// hostOrdinal is the ordinal a StatefulSet pod's name ends with
// (<name>-<n>).
func hostOrdinal(host string) (int, bool) {
	host, _, _ = strings.Cut(host, ".")
	i := strings.LastIndexByte(host, '-')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.Atoi(host[i+1:])
	return n, err == nil && n >= 0
}

func validClusterName(name string) bool {
	if name == "" || len(name) > 128 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// withHost puts Host in front of every listener address that names no host
// of its own (":9092" becomes "127.0.0.11:9092").
func (l ListenConfig) withHost() ListenConfig {
	if l.Host == "" {
		return l
	}
	for _, addr := range []*string{&l.HTTP, &l.Kafka, &l.Remoting, &l.GRPC, &l.Pulsar, &l.PulsarSSL, &l.MQTT, &l.MQTTSSL} {
		if host, port, err := net.SplitHostPort(*addr); err == nil && host == "" {
			*addr = net.JoinHostPort(l.Host, port)
		}
	}
	return l
}

// GCTarget is the Go garbage collector target to run with: gc_percent, or
// when it is 0 the default for the node's kind (measured: a 3-member
// cluster's Kafka produce of 1 KiB records costs its leader 10.6 CPU-s per
// million at 400 and 7.3 at 100, of 100 B records 1.67 and 1.23; a single
// node's 100 B records 0.44 at 400 and 0.59 at 100).
func (c Config) GCTarget() int {
	switch {
	case c.GCPercent != 0:
		return c.GCPercent
	case c.Cluster.Members != "":
		return 100
	}
	return 400
}

// topicRetention is the default topic retention: broker.retention, or the
// deprecated storage.retention_time when that is set.
func (c Config) topicRetention() time.Duration {
	if c.Storage.RetentionTime > 0 {
		return c.Storage.RetentionTime
	}
	return c.Broker.Retention
}
