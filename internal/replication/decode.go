package replication

import (
	"fmt"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Raft messages decoded without copying what they carry: proto.Unmarshal
// copies every entry's data out of the frame, which on a follower cost as
// much as storing the entries. decodeMessage decodes the fields Raft's
// messages between members use, the entries' data and the context aliasing
// the frame (read into a buffer of its own, which the message then owns);
// anything else — a snapshot, storage responses, a field or enum value it
// does not know, an odd wire type — goes through proto.Unmarshal, so the
// result is always what proto.Unmarshal would give.

// Field numbers of raftpb.Message and raftpb.Entry.
const (
	msgType, msgTo, msgFrom, msgTerm, msgLogTerm, msgIndex, msgEntries, msgCommit = 1, 2, 3, 4, 5, 6, 7, 8
	msgReject, msgRejectHint, msgContext, msgVote                                 = 10, 11, 12, 13
	entryType, entryTerm, entryIndex, entryData                                   = 1, 2, 3, 4

	maxMessageType = int32(pb.MsgForgetLeader)
	maxEntryType   = int32(pb.EntryConfChangeV2)
)

// decodeMessage decodes a Raft message; the message may keep slices of b.
func decodeMessage(b []byte) (*pb.Message, error) {
	if m, ok := decodeFast(b); ok {
		return m, nil
	}
	m := &pb.Message{}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("raft message: %w", err)
	}
	return m, nil
}

// decodeFast decodes b when it holds only the fields it knows, each with
// its wire type (false: leave it to proto.Unmarshal).
func decodeFast(b []byte) (*pb.Message, bool) {
	m := &pb.Message{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		switch num {
		case msgEntries, msgContext:
			if typ != protowire.BytesType {
				return nil, false
			}
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, false
			}
			b = b[n:]
			if num == msgContext {
				m.Context = nonNil(v)
				continue
			}
			e, ok := decodeEntry(v)
			if !ok {
				return nil, false
			}
			m.Entries = append(m.Entries, e)
		case msgType, msgTo, msgFrom, msgTerm, msgLogTerm, msgIndex, msgCommit, msgReject, msgRejectHint, msgVote:
			if typ != protowire.VarintType {
				return nil, false
			}
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, false
			}
			b = b[n:]
			switch num {
			case msgType:
				if v > uint64(maxMessageType) {
					return nil, false
				}
				m.Type = pb.MessageType(v).Enum()
			case msgTo:
				m.To = &v
			case msgFrom:
				m.From = &v
			case msgTerm:
				m.Term = &v
			case msgLogTerm:
				m.LogTerm = &v
			case msgIndex:
				m.Index = &v
			case msgCommit:
				m.Commit = &v
			case msgReject:
				m.Reject = new(protowire.DecodeBool(v))
			case msgRejectHint:
				m.RejectHint = &v
			case msgVote:
				m.Vote = &v
			}
		default:
			return nil, false
		}
	}
	return m, true
}

// decodeEntry decodes one entry; its data aliases b.
func decodeEntry(b []byte) (*pb.Entry, bool) {
	e := &pb.Entry{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		switch {
		case num == entryData && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, false
			}
			b = b[n:]
			e.Data = nonNil(v)
		case (num == entryType || num == entryTerm || num == entryIndex) && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, false
			}
			b = b[n:]
			switch num {
			case entryType:
				if v > uint64(maxEntryType) {
					return nil, false
				}
				e.Type = pb.EntryType(v).Enum()
			case entryTerm:
				e.Term = &v
			case entryIndex:
				e.Index = &v
			}
		default:
			return nil, false
		}
	}
	return e, true
}

// nonNil keeps a present empty bytes field present (proto2's optional
// bytes are set when not nil).
func nonNil(v []byte) []byte {
	if v == nil {
		return []byte{}
	}
	return v
}
