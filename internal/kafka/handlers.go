package kafka

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handlerFunc answers one decoded request.
type handlerFunc func(rc *reqCtx, req kmsg.Request) reply

// apiHandler is one row of the dispatch table; the same table produces the
// ApiVersions answer, so what is advertised is exactly what is served.
type apiHandler struct {
	key      int16
	min, max int16
	fn       handlerFunc
}

const (
	produceKey     = 0
	apiVersionsKey = 18
)

// handlerTable lists every supported API key with its version range. Version
// notes live in each handler's file.
func handlerTable() []apiHandler {
	return []apiHandler{
		{0, 0, 11, handleProduce},
		{1, 4, 16, handleFetch},
		{2, 0, 7, handleListOffsets},
		{3, 0, 12, handleMetadata},
		{8, 0, 9, handleOffsetCommit},
		{9, 0, 9, handleOffsetFetch},
		{10, 0, 4, handleFindCoordinator},
		{11, 0, 9, handleJoinGroup},
		{12, 0, 4, handleHeartbeat},
		{13, 0, 5, handleLeaveGroup},
		{14, 0, 5, handleSyncGroup},
		{15, 0, 6, handleDescribeGroups},
		{16, 0, 5, handleListGroups},
		{17, 0, 1, handleSaslHandshake},
		{18, 0, 4, handleApiVersions},
		{19, 0, 7, handleCreateTopics},
		{20, 0, 6, handleDeleteTopics},
		{21, 0, 2, handleDeleteRecords},
		{22, 0, 4, handleInitProducerID},
		{23, 0, 4, handleOffsetForLeaderEpoch},
		{24, 0, 3, handleAddPartitionsToTxn},
		{25, 0, 3, handleAddOffsetsToTxn},
		{26, 0, 3, handleEndTxn},
		{28, 0, 3, handleTxnOffsetCommit},
		{29, 0, 3, handleDescribeAcls},
		{30, 0, 3, handleCreateAcls},
		{31, 0, 3, handleDeleteAcls},
		{32, 0, 4, handleDescribeConfigs},
		{33, 0, 2, handleAlterConfigs},
		{35, 0, 4, handleDescribeLogDirs},
		{36, 0, 2, handleSaslAuthenticate},
		{37, 0, 3, handleCreatePartitions},
		{42, 0, 2, handleDeleteGroups},
		{43, 0, 2, handleElectLeaders},
		{44, 0, 1, handleIncrementalAlterConfigs},
		{45, 0, 1, handleAlterPartitionReassignments},
		{46, 0, 0, handleListPartitionReassignments},
		{47, 0, 0, handleOffsetDelete},
		{48, 0, 1, handleDescribeClientQuotas},
		{49, 0, 1, handleAlterClientQuotas},
		{50, 0, 0, handleDescribeUserScramCredentials},
		{51, 0, 0, handleAlterUserScramCredentials},
		{60, 0, 1, handleDescribeCluster},
		{61, 0, 0, handleDescribeProducers},
		{65, 0, 0, handleDescribeTransactions},
		{66, 0, 1, handleListTransactions},
		{68, 0, 1, handleConsumerGroupHeartbeat},
		{69, 0, 1, handleConsumerGroupDescribe},
		{76, 1, 1, handleShareGroupHeartbeat},
		{77, 1, 1, handleShareGroupDescribe},
		{78, 1, 2, handleShareFetch},
		{79, 1, 2, handleShareAcknowledge},
		{90, 0, 1, handleDescribeShareGroupOffsets},
		{91, 0, 0, handleAlterShareGroupOffsets},
		{92, 0, 0, handleDeleteShareGroupOffsets},
	}
}

// handlersByKey is the table indexed by key; built once per process in
// lookupHandler's first call would be global state, so it is a plain array
// filled from handlerTable at package level without init().
var handlersByKey = func() (out [128]*apiHandler) {
	for _, h := range handlerTable() {
		h := h
		out[h.key] = &h
	}
	return out
}()

func lookupHandler(key int16) *apiHandler {
	if key < 0 || int(key) >= len(handlersByKey) {
		return nil
	}
	return handlersByKey[key]
}
