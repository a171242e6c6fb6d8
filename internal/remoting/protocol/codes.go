package protocol

// Request codes (RocketMQ RequestCode), the ones Rosetta serves or sends.
const (
	SendMessage                     = 10
	PullMessage                     = 11
	QueryMessage                    = 12
	QueryConsumerOffset             = 14
	UpdateConsumerOffset            = 15
	UpdateAndCreateTopic            = 17
	SearchOffsetByTimestamp         = 29
	GetMaxOffset                    = 30
	GetMinOffset                    = 31
	GetEarliestMsgStoreTime         = 32
	ViewMessageByID                 = 33
	HeartBeat                       = 34
	UnregisterClient                = 35
	ConsumerSendMsgBack             = 36
	EndTransaction                  = 37
	GetConsumerListByGroup          = 38
	CheckTransactionState           = 39
	NotifyConsumerIDsChanged        = 40
	LockBatchMQ                     = 41
	UnlockBatchMQ                   = 42
	CheckClientConfig               = 46
	GetRouteInfoByTopic             = 105
	GetBrokerClusterInfo            = 106
	GetAllSubscriptionGroupConfig   = 201
	GetAllTopicListFromNameserver   = 206
	DeleteTopicInBroker             = 215
	DeleteTopicInNamesrv            = 216
	ResetConsumerClientOffset       = 220
	GetConsumerStatusFromClient     = 221
	InvokeBrokerToResetOffset       = 222
	InvokeBrokerToGetConsumerStatus = 223
	GetConsumerRunningInfo          = 307
	ConsumeMessageDirectly          = 309
	SendMessageV2                   = 310
	SendBatchMessage                = 320
	SendReplyMessage                = 324
	SendReplyMessageV2              = 325
	PushReplyMessageToClient        = 326
	LitePullMessage                 = 361
	QueryAssignment                 = 400
	SetMessageRequestMode           = 401
	RecallMessage                   = 370
	PopMessage                      = 200050
	AckMessage                      = 200051
	ChangeMessageInvisibleTime      = 200053
	Notification                    = 200054
	BatchAckMessage                 = 200151
	AuthCreateUser                  = 3001
	AuthUpdateUser                  = 3002
	AuthDeleteUser                  = 3003
	AuthGetUser                     = 3004
	AuthListUser                    = 3005
	AuthCreateACL                   = 3006
	AuthUpdateACL                   = 3007
	AuthDeleteACL                   = 3008
	AuthGetACL                      = 3009
	AuthListACL                     = 3010
)

// Response codes (RocketMQ ResponseCode and RemotingSysResponseCode).
const (
	Success                  = 0
	SystemError              = 1
	SystemBusy               = 2
	RequestCodeNotSupported  = 3
	TransactionFailed        = 4
	FlushDiskTimeout         = 10
	SlaveNotAvailable        = 11
	FlushSlaveTimeout        = 12
	MessageIllegal           = 13
	ServiceNotAvailable      = 14
	VersionNotSupported      = 15
	NoPermission             = 16
	TopicNotExist            = 17
	TopicExistAlready        = 18
	PullNotFound             = 19
	PullRetryImmediately     = 20
	PullOffsetMoved          = 21
	QueryNotFound            = 22
	SubscriptionParseFailed  = 23
	SubscriptionNotExist     = 24
	SubscriptionNotLatest    = 25
	SubscriptionGroupMissing = 26
	InvalidParameter         = 29
	ConsumerNotOnline        = 206
	PollingFull              = 209
	PollingTimeout           = 210
)

// Admin request codes.
const (
	GetAllTopicConfig                = 21
	GetBrokerRuntimeInfo             = 28
	UpdateAndCreateSubscriptionGroup = 200
	GetTopicStatsInfo                = 202
	GetConsumerConnectionList        = 203
	DeleteSubscriptionGroup          = 207
	GetConsumeStats                  = 208
)
