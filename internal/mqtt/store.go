package mqtt

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/mqtt/packet"
)

// The durable MQTT state: sessions that outlive their connections (their
// subscriptions, their place in each queue, inbound QoS 2 packet
// identifiers awaiting PUBREL, outbound QoS 2 messages in flight) and
// retained messages, as JSON records in the internal queue
// system/internal/mqtt kept by a broker.StateLog (snapshots and
// checkpoints included), so they survive a broker restart or crash:
//
//   - a QoS 2 publish and the record marking its packet identifier go in
//     one append: after a crash the client's PUBLISH sent again (DUP)
//     finds the mark, so the message is never stored twice;
//   - an outbound QoS 2 message is recorded (packet identifier, queue,
//     offset) before it is sent: after a crash it goes again with its
//     packet identifier, which the client recognises;
//   - places in queues are recorded every second and when the connection
//     ends, never past a QoS 1 message in flight: after a crash what was
//     not acknowledged comes again.

// StateTopic is the internal topic of MQTT state records.
var StateTopic = model.TopicName{Tenant: "system", Namespace: "internal", Topic: "mqtt"}

// stateSection names the state's checkpoint section.
const stateSection = "mqtt.state"

// stateRecord is one change of the state.
type stateRecord struct {
	Kind string `json:"k"` // session, drop, pos, in2, out2, retain, will, image

	Client    string               `json:"c,omitempty"`
	Expiry    int64                `json:"e,omitempty"` // session expiry (s)
	Connected bool                 `json:"on,omitempty"`
	At        int64                `json:"at,omitempty"` // ms: when it disconnected
	Subs      []storedSub          `json:"s,omitempty"`
	Positions map[string]int64     `json:"p,omitempty"` // queue id → offset
	PacketID  uint16               `json:"i,omitempty"`
	Set       bool                 `json:"set,omitempty"`
	Out       *storedOut           `json:"o,omitempty"`
	Retained  *storedRetained      `json:"r,omitempty"`
	Session   *storedSessionImage  `json:"img,omitempty"` // a snapshot entry
	Inbound   []uint16             `json:"in,omitempty"`
	Outbound  map[string]storedOut `json:"out,omitempty"`
	Will      *storedWill          `json:"w,omitempty"`   // kind will: set
	WillID    string               `json:"wid,omitempty"` // kind will: the will cleared (sent, or its client disconnected)
}

// storedWill is a connected client's will, kept until it is sent or the
// client disconnects, so a broker crash does not lose it: the broker
// that comes back sends it (after its delay, unless the session comes
// back first).
type storedWill struct {
	ID        string         `json:"id"` // the connection's: a clear names the will it clears
	Message   storedRetained `json:"m"`
	Retain    bool           `json:"rt,omitempty"`
	DelayMs   int64          `json:"d,omitempty"`
	Principal string         `json:"pr"`
	Host      string         `json:"h,omitempty"`
}

type storedSub struct {
	Filter  string `json:"f"`
	QoS     byte   `json:"q"`
	NoLocal bool   `json:"nl,omitempty"`
	RAP     bool   `json:"rap,omitempty"`
	RH      byte   `json:"rh,omitempty"`
	ID      int    `json:"id,omitempty"`
}

// storedOut is an outbound QoS 2 message: in flight, or done (PUBCOMP)
// and remembered while the session's recorded place is below it, so a
// replay from that place after a crash does not send it again.
type storedOut struct {
	ID       uint16 `json:"id,omitempty"` // its packet identifier
	Queue    uint64 `json:"q"`
	Offset   int64  `json:"o"`
	Released bool   `json:"rel,omitempty"`
	Done     bool   `json:"done,omitempty"`
}

type storedRetained struct {
	Topic   string            `json:"t"`
	Payload []byte            `json:"p,omitempty"`
	QoS     byte              `json:"q"`
	Client  string            `json:"c,omitempty"`
	Props   map[string]string `json:"props,omitempty"`
	User    [][2]string       `json:"u,omitempty"`
	Corr    []byte            `json:"cd,omitempty"`
}

// storedSessionImage is a session in a snapshot.
type storedSessionImage struct {
	Expiry    int64            `json:"e"`
	Connected bool             `json:"on,omitempty"`
	At        int64            `json:"at,omitempty"`
	Subs      []storedSub      `json:"s,omitempty"`
	Positions map[string]int64 `json:"p,omitempty"`
}

// sessionImage is a session as the state holds it.
type sessionImage struct {
	expiry    int64
	connected bool
	at        int64
	subs      []storedSub
	positions map[model.QueueID]model.QueueOffset
	inbound   map[uint16]bool
	// outbound: QoS 2 messages sent, by where they are stored (packet
	// identifiers are used again once an exchange completes).
	outbound map[outKey]storedOut
}

// outKey is where a message is stored.
type outKey struct {
	queue  model.QueueID
	offset model.QueueOffset
}

func (o storedOut) key() outKey { return outKey{model.QueueID(o.Queue), model.QueueOffset(o.Offset)} }

// state is the state machine.
type state struct {
	mu       sync.Mutex
	sessions map[string]*sessionImage
	retained map[string]*storedRetained
	wills    map[string]*storedWill // by client identifier
}

func newState() *state {
	return &state{sessions: map[string]*sessionImage{}, retained: map[string]*storedRetained{}, wills: map[string]*storedWill{}}
}

// Apply applies one record.
func (st *state) Apply(_ int, _ model.QueueOffset, payload []byte) {
	var r stateRecord
	if err := json.Unmarshal(payload, &r); err != nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.applyLocked(&r)
}

func (st *state) image(client string) *sessionImage {
	im := st.sessions[client]
	if im == nil {
		im = &sessionImage{positions: map[model.QueueID]model.QueueOffset{}, inbound: map[uint16]bool{}, outbound: map[outKey]storedOut{}}
		st.sessions[client] = im
	}
	return im
}

func (st *state) applyLocked(r *stateRecord) {
	switch r.Kind {
	case "session":
		im := st.image(r.Client)
		im.expiry, im.connected, im.at = r.Expiry, r.Connected, r.At
		if r.Subs != nil {
			im.subs = r.Subs
		}
	case "drop":
		delete(st.sessions, r.Client)
	case "pos":
		im := st.image(r.Client)
		for q, off := range decodePositions(r.Positions) {
			im.positions[q] = off
		}
		// QoS 2 messages done are remembered until the places pass them.
		for k, o := range im.outbound {
			if o.Done && k.offset < im.positions[k.queue] {
				delete(im.outbound, k)
			}
		}
	case "in2":
		im := st.image(r.Client)
		if r.Set {
			im.inbound[r.PacketID] = true
		} else {
			delete(im.inbound, r.PacketID)
		}
	case "out2":
		im := st.image(r.Client)
		if r.Out == nil {
			return
		}
		o := *r.Out
		o.ID = r.PacketID
		im.outbound[o.key()] = o // (a done one stays until the places pass it: "pos")
	case "retain":
		if rt := r.Retained; rt != nil {
			if len(rt.Payload) == 0 {
				delete(st.retained, rt.Topic)
			} else {
				st.retained[rt.Topic] = rt
			}
		}
	case "will":
		switch w := st.wills[r.Client]; {
		case r.Will != nil:
			st.wills[r.Client] = r.Will
		case w != nil && (r.WillID == "" || w.ID == r.WillID):
			delete(st.wills, r.Client)
		}
	case "image":
		if s := r.Session; s != nil {
			im := st.image(r.Client)
			im.expiry, im.connected, im.at, im.subs = s.Expiry, s.Connected, s.At, s.Subs
			im.positions = decodePositions(s.Positions)
			for _, id := range r.Inbound {
				im.inbound[id] = true
			}
			for _, o := range r.Outbound {
				im.outbound[o.key()] = o
			}
		}
	}
}

func encodePositions(p map[model.QueueID]model.QueueOffset) map[string]int64 {
	out := make(map[string]int64, len(p))
	for q, off := range p {
		out[fmt.Sprint(uint64(q))] = int64(off)
	}
	return out
}

func decodePositions(p map[string]int64) map[model.QueueID]model.QueueOffset {
	out := make(map[model.QueueID]model.QueueOffset, len(p))
	for k, off := range p {
		var q uint64
		if _, err := fmt.Sscan(k, &q); err == nil {
			out[model.QueueID(q)] = model.QueueOffset(off)
		}
	}
	return out
}

// Entries are the state as records: one image per session, one retain
// record per retained message.
func (st *state) Entries(int) [][]byte {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out [][]byte
	for _, c := range slices.Sorted(maps.Keys(st.sessions)) {
		im := st.sessions[c]
		r := stateRecord{Kind: "image", Client: c, Session: &storedSessionImage{Expiry: im.expiry, Connected: im.connected, At: im.at,
			Subs: im.subs, Positions: encodePositions(im.positions)}, Outbound: map[string]storedOut{}}
		for id := range im.inbound {
			r.Inbound = append(r.Inbound, id)
		}
		slices.Sort(r.Inbound)
		for k, o := range im.outbound {
			r.Outbound[fmt.Sprintf("%d/%d", k.queue, k.offset)] = o
		}
		b, _ := json.Marshal(&r)
		out = append(out, b)
	}
	for _, t := range slices.Sorted(maps.Keys(st.retained)) {
		b, _ := json.Marshal(&stateRecord{Kind: "retain", Retained: st.retained[t]})
		out = append(out, b)
	}
	for _, c := range slices.Sorted(maps.Keys(st.wills)) {
		b, _ := json.Marshal(&stateRecord{Kind: "will", Client: c, Will: st.wills[c]})
		out = append(out, b)
	}
	return out
}

// Restore replaces the state with entries.
func (st *state) Restore(_ int, entries [][]byte) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.sessions, st.retained, st.wills = map[string]*sessionImage{}, map[string]*storedRetained{}, map[string]*storedWill{}
	for _, e := range entries {
		var r stateRecord
		if err := json.Unmarshal(e, &r); err != nil {
			return fmt.Errorf("%w: mqtt state entry: %v", model.ErrCorruptRecord, err)
		}
		st.applyLocked(&r)
	}
	return nil
}

// Len is the number of entries.
func (st *state) Len(int) int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.sessions) + len(st.retained) + len(st.wills)
}

// store writes state records.
type store struct {
	b   *broker.Broker
	log *broker.StateLog
	st  *state
}

// openStore loads the state from system/internal/mqtt.
func openStore(ctx context.Context, b *broker.Broker) (*store, error) {
	t, err := b.EnsureInternalTopic(ctx, StateTopic, 1, broker.TopicConfig{})
	if err != nil {
		return nil, err
	}
	st := newState()
	l := b.NewStateLog(stateSection, t.Queues[:1], st)
	if _, err := l.Load(); err != nil {
		return nil, err
	}
	return &store{b: b, log: l, st: st}, nil
}

// write appends records (with extra ones of other queues in the same
// append) and waits until they are durable and applied; noWait returns
// once written.
func (s *store) write(ctx context.Context, recs []*stateRecord, extra []*broker.Record, noWait bool) error {
	out := make([]*broker.Record, 0, len(recs))
	for _, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		out = append(out, &broker.Record{Format: model.FormatInternal, Count: 1, Payload: b})
	}
	return s.log.Write(ctx, 0, out, extra, broker.AppendOptions{NoWait: noWait})
}

// retainedRecord is a retained publish as stored.
func retainedRecord(p *packet.Publish, client string) *storedRetained {
	r := &storedRetained{Topic: p.Topic, Payload: p.Payload, QoS: p.QoS, Client: client}
	pr := &p.Props
	if pr.Has(packet.PropContentType) || pr.Has(packet.PropResponseTopic) || pr.Has(packet.PropPayloadFormat) {
		r.Props = map[string]string{}
		if pr.Has(packet.PropContentType) {
			r.Props["ct"] = pr.ContentType
		}
		if pr.Has(packet.PropResponseTopic) {
			r.Props["rt"] = pr.ResponseTopic
		}
		if pr.Has(packet.PropPayloadFormat) {
			r.Props["pf"] = fmt.Sprint(pr.PayloadFormat)
		}
	}
	if pr.Has(packet.PropCorrelationData) {
		r.Corr = pr.CorrelationData
	}
	for _, u := range pr.User {
		r.User = append(r.User, [2]string{u.Key, u.Value})
	}
	return r
}

// publish is a stored retained message as a PUBLISH.
func (r *storedRetained) publish() packet.Publish {
	p := packet.Publish{Topic: r.Topic, QoS: r.QoS, Retain: true, Payload: r.Payload}
	if v, ok := r.Props["ct"]; ok {
		p.Props.Set(packet.PropContentType)
		p.Props.ContentType = v
	}
	if v, ok := r.Props["rt"]; ok {
		p.Props.Set(packet.PropResponseTopic)
		p.Props.ResponseTopic = v
	}
	if r.Props["pf"] == "1" {
		p.Props.Set(packet.PropPayloadFormat)
		p.Props.PayloadFormat = 1
	}
	if r.Corr != nil {
		p.Props.Set(packet.PropCorrelationData)
		p.Props.CorrelationData = r.Corr
	}
	for _, u := range r.User {
		p.Props.User = append(p.Props.User, packet.UserProperty{Key: u[0], Value: u[1]})
	}
	return p
}

// sessionsAt lists the stored sessions (copies), for the server to bring
// back at start.
func (st *state) sessionsAt() map[string]*sessionImage {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make(map[string]*sessionImage, len(st.sessions))
	for c, im := range st.sessions {
		cp := *im
		cp.positions = maps.Clone(im.positions)
		cp.inbound = maps.Clone(im.inbound)
		cp.outbound = maps.Clone(im.outbound)
		out[c] = &cp
	}
	return out
}

// has reports whether a session is recorded under a client identifier.
func (st *state) has(client string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	_, ok := st.sessions[client]
	return ok
}

// retainedAt lists the stored retained messages.
func (st *state) willsAt() map[string]*storedWill {
	st.mu.Lock()
	defer st.mu.Unlock()
	return maps.Clone(st.wills)
}

func (st *state) hasWill(client string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.wills[client] != nil
}

func (st *state) retainedAt() []*storedRetained {
	st.mu.Lock()
	defer st.mu.Unlock()
	return slices.Collect(maps.Values(st.retained))
}

// snapshotEvery is how often the state log is snapshotted (on cadence).
const snapshotEvery = 30 * time.Second
