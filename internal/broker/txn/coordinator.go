// Package txn is the Kafka transaction coordinator: transactional ids,
// producer epochs and fencing, the partitions and consumer groups of each
// open transaction, its pending offset commits, and the two-phase end that
// writes commit or abort markers to every partition.
//
// Every state change is a record in the internal queues __transaction_state
// (the whole state of one transactional id, the newest record wins; an id's
// records go to the queue of Kafka's hash placement), so it shares the log's
// group commit, and the state is what applying those queues gives, once the
// records are visible (broker.StateLog: snapshot records in the queues let
// old records go, a checkpoint section shortens restarts).
// Ending a transaction writes the prepare record and every marker in one
// append (the prepare record first: a recovered log never has a marker
// without it), then commits the pending offsets, then the complete record;
// a transaction found prepared after a restart is completed again (a
// repeated marker changes nothing).
package txn

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/producers"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// State is a transaction's state, as Kafka names them.
type State int8

// Transaction states.
const (
	StateEmpty State = iota
	StateOngoing
	StatePrepareCommit
	StatePrepareAbort
	StateCompleteCommit
	StateCompleteAbort
	StateDead
)

var stateNames = [...]string{"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "Unknown"
}

// ParseState parses a Kafka state name.
func ParseState(s string) (State, bool) {
	i := slices.Index(stateNames[:], s)
	return State(i), i >= 0
}

// Errors, mapped to Kafka codes by the front-end.
var (
	ErrInvalidProducerIDMapping = errors.New("the producer id does not match the transactional id")
	ErrProducerFenced           = errors.New("producer fenced: a newer producer with the same transactional id exists")
	ErrInvalidProducerEpoch     = errors.New("invalid producer epoch")
	ErrInvalidTxnState          = errors.New("invalid transaction state for this request")
	ErrConcurrentTransactions   = errors.New("the previous transaction is still completing")
	ErrInvalidTimeout           = errors.New("transaction timeout is out of range")
	ErrNotInTransaction         = errors.New("partition not added to the transaction")
	ErrUnknownTransactionalID   = errors.New("unknown transactional id")
)

// Partition is one partition of a transaction.
type Partition struct {
	Topic model.TopicName `json:"t"`
	Index int32           `json:"i"`
	Queue model.QueueID   `json:"q"`
}

// PendingOffset is an offset committed inside a transaction.
type PendingOffset struct {
	Partition
	Group    string            `json:"g"`
	Offset   model.QueueOffset `json:"o"`
	Metadata string            `json:"m,omitempty"`
	// LeaderEpoch is the committed leader epoch (records written before it
	// was kept decode as 0, a single node's only epoch).
	LeaderEpoch model.Epoch `json:"e"`
}

// Status is the state of one transactional id.
type Status struct {
	ID         string          `json:"id"`
	PID        int64           `json:"pid"`
	Epoch      int16           `json:"epoch"`
	LastEpoch  int16           `json:"lastEpoch"`
	TimeoutMs  int32           `json:"timeoutMs"`
	State      State           `json:"state"`
	Partitions []Partition     `json:"partitions,omitempty"`
	Groups     []string        `json:"groups,omitempty"`
	Offsets    []PendingOffset `json:"offsets,omitempty"`
	StartMs    int64           `json:"startMs"` // transaction start (-1 when none is open)
	UpdateMs   int64           `json:"updateMs"`
	Deleted    bool            `json:"deleted,omitempty"`
}

func (s *Status) hasPartition(q model.QueueID) bool {
	return slices.ContainsFunc(s.Partitions, func(p Partition) bool { return p.Queue == q })
}

// Options configure the coordinator.
type Options struct {
	// MaxTimeout bounds a producer's transaction timeout (Kafka's
	// transaction.max.timeout.ms, 15 minutes).
	MaxTimeout time.Duration
	// AbortInterval is how often timed-out transactions are looked for
	// (1 s).
	AbortInterval time.Duration
	// IDExpiration forgets a transactional id idle this long
	// (transactional.id.expiration.ms, 7 days).
	IDExpiration time.Duration
	// SnapshotInterval is how often the state queues are checked for a
	// snapshot record (30 s).
	SnapshotInterval time.Duration
	// Peers, in a cluster of several replication groups, reaches the
	// partitions and consumer groups other groups hold; nil: this
	// coordinator's broker holds them all.
	Peers  Peers
	Logger *slog.Logger
	Now    func() time.Time
}

// Peers is what a transaction coordinator needs of the other replication
// groups of a cluster. Both calls are idempotent: an interrupted end is
// completed by calling them again.
type Peers interface {
	// Remote says whether a partition is another group's.
	Remote(p Partition) bool
	// WriteMarkers writes a transaction's commit or abort markers into
	// partitions of other groups.
	WriteMarkers(ctx context.Context, parts []Partition, pid int64, epoch int16, commit bool) error
	// CommitOffsets makes a committed transaction's offsets of a consumer
	// group its committed offsets, at the group's coordinator.
	CommitOffsets(ctx context.Context, group string, offsets []PendingOffset) error
	// Sole reports whether this group coordinates every transactional id
	// (a cluster made with one group, whose groups added later coordinate
	// none).
	Sole() bool
}

type txn struct {
	mu sync.Mutex // held across an operation on the id
	st Status     // written by the applier under Coordinator.mu; read with status
}

// active is what the produce path checks of an open transaction.
type active struct {
	epoch  int16
	queues map[model.QueueID]bool
}

// Coordinator is the transaction coordinator of this node.
type Coordinator struct {
	b      *broker.Broker
	engine *storage.Engine
	ids    *producers.Manager
	index  *producers.TxnIndex
	opts   Options
	log    *slog.Logger

	state      *broker.StateLog
	partitions int

	mu      sync.RWMutex
	txns    map[string]*txn
	active  map[int64]*active                // producer id → open transaction
	epochs  map[int64]int16                  // producer id → current epoch
	pending map[string]map[model.QueueID]int // group → queue → transactions with a pending offset

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// StateTopic is the internal topic holding coordinator state (Kafka clients
// see it as __transaction_state).
var StateTopic = model.TopicName{Tenant: "system", Namespace: "internal", Topic: "transaction_state"}

// New opens the coordinator: it loads the state, completes transactions a
// restart interrupted, aborts transactions the log has open but no
// coordinator state knows, and starts the timeout loop.
func New(ctx context.Context, b *broker.Broker, ids *producers.Manager, index *producers.TxnIndex, opts Options) (*Coordinator, error) {
	if opts.MaxTimeout <= 0 {
		opts.MaxTimeout = 15 * time.Minute
	}
	if opts.AbortInterval <= 0 {
		opts.AbortInterval = time.Second
	}
	if opts.IDExpiration <= 0 {
		opts.IDExpiration = 7 * 24 * time.Hour
	}
	if opts.SnapshotInterval <= 0 {
		opts.SnapshotInterval = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	t, err := b.EnsureInternalTopic(ctx, StateTopic, statePartitions, broker.TopicConfig{})
	if err != nil {
		return nil, err
	}
	c := &Coordinator{b: b, engine: b.Engine(), ids: ids, index: index, opts: opts, log: opts.Logger.With("component", "txn-coordinator"),
		txns: map[string]*txn{}, active: map[int64]*active{}, epochs: map[int64]int16{},
		pending: map[string]map[model.QueueID]int{}, partitions: len(t.Queues)}
	c.state = b.NewStateLog(stateSection, t.Queues, c)
	if err := c.load(ctx); err != nil {
		return nil, err
	}
	if err := c.recover(ctx); err != nil {
		return nil, err
	}
	bctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.wg.Add(2)
	go func() {
		defer c.wg.Done()
		c.run(bctx)
	}()
	go func() {
		defer c.wg.Done()
		c.state.Run(bctx, opts.SnapshotInterval)
	}()
	return c, nil
}

// Close stops the background loops (the engine's last checkpoint holds
// the state).
func (c *Coordinator) Close() error {
	c.cancel()
	c.wg.Wait()
	return nil
}

// status returns t's state.
func (c *Coordinator) status(t *txn) Status {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return t.st
}

func (c *Coordinator) now() int64 { return c.opts.Now().UnixMilli() }

// locked returns an id's transaction, locked (INVALID_PRODUCER_ID_MAPPING
// when the id is unknown).
func (c *Coordinator) locked(id string) (*txn, error) {
	t := c.lookup(id)
	if t == nil {
		return nil, ErrInvalidProducerIDMapping
	}
	t.mu.Lock()
	return t, nil
}

// lockedFor is locked for a request of producer pid at epoch: it returns
// the transaction locked and its state, or an error with nothing locked.
func (c *Coordinator) lockedFor(id string, pid int64, epoch int16) (*txn, Status, error) {
	t, err := c.locked(id)
	if err != nil {
		return nil, Status{}, err
	}
	st := c.status(t)
	if err := checkProducer(&st, pid, epoch); err != nil {
		t.mu.Unlock()
		return nil, st, err
	}
	return t, st, nil
}

// lookup returns an id's transaction (nil when unknown).
func (c *Coordinator) lookup(id string) *txn {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.txns[id]
}

// get returns an id's transaction, creating an empty one.
func (c *Coordinator) get(id string) *txn {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.txns[id]
	if t == nil {
		t = &txn{st: Status{ID: id, PID: -1, LastEpoch: -1, StartMs: -1}}
		c.txns[id] = t
	}
	return t
}

// persist writes a new state for t (with extra records in the same
// append, after it); t.mu is held. It returns once the state is durable
// and applied, as Kafka answers once its transaction log write is
// replicated.
func (c *Coordinator) persist(ctx context.Context, t *txn, next Status, extra []*storage.Record) error {
	next.UpdateMs = c.now()
	return c.state.Write(ctx, c.partition(next.ID), []*storage.Record{c.stateRecord(&next)}, extra, storage.AppendOptions{})
}

// applyLocked installs a new state and keeps the lookup maps in step
// (c.mu held).
func (c *Coordinator) applyLocked(t *txn, next Status) {
	old := t.st
	t.st = next
	if a := c.active[old.PID]; a != nil && old.State == StateOngoing {
		delete(c.active, old.PID)
	}
	for _, o := range old.Offsets {
		if g := c.pending[o.Group]; g != nil {
			if g[o.Queue]--; g[o.Queue] <= 0 {
				delete(g, o.Queue)
			}
			if len(g) == 0 {
				delete(c.pending, o.Group)
			}
		}
	}
	if next.Deleted {
		delete(c.txns, next.ID)
		delete(c.epochs, next.PID)
		return
	}
	if next.PID >= 0 {
		c.epochs[next.PID] = next.Epoch
	}
	if next.State == StateOngoing {
		a := &active{epoch: next.Epoch, queues: make(map[model.QueueID]bool, len(next.Partitions))}
		for _, p := range next.Partitions {
			a.queues[p.Queue] = true
		}
		c.active[next.PID] = a
	}
	for _, o := range next.Offsets {
		g := c.pending[o.Group]
		if g == nil {
			g = map[model.QueueID]int{}
			c.pending[o.Group] = g
		}
		g[o.Queue]++
	}
}

// checkProducer validates a request's producer id and epoch against t.
func checkProducer(st *Status, pid int64, epoch int16) error {
	switch {
	case st.PID < 0 || st.PID != pid:
		return ErrInvalidProducerIDMapping
	case epoch != st.Epoch:
		return ErrProducerFenced
	}
	return nil
}

// Verify is the produce path's check of a transactional batch: producer pid
// at epoch has queue in its open transaction.
func (c *Coordinator) Verify(pid int64, epoch int16, queue model.QueueID) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if cur, ok := c.epochs[pid]; ok && epoch < cur {
		return ErrInvalidProducerEpoch
	}
	a := c.active[pid]
	if a == nil || a.epoch != epoch || !a.queues[queue] {
		return ErrNotInTransaction
	}
	return nil
}

// HasPendingOffsets says whether a transaction holds an uncommitted offset
// of group for queue (KIP-447's require-stable fetches wait for it).
func (c *Coordinator) HasPendingOffsets(group string, queue model.QueueID) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.pending[group][queue] > 0
}

// InitProducerID gives a transactional id its producer id and a new epoch,
// fencing the previous producer: its open transaction is aborted. A
// request naming the current producer (KIP-360) bumps its epoch; naming
// another is fenced.
func (c *Coordinator) InitProducerID(ctx context.Context, id string, timeout time.Duration, reqPID int64, reqEpoch int16) (int64, int16, error) {
	if timeout <= 0 || timeout > c.opts.MaxTimeout {
		return 0, 0, ErrInvalidTimeout
	}
	if !validID(id) {
		return 0, 0, ErrUnknownTransactionalID
	}
	t := c.get(id)
	t.mu.Lock()
	defer t.mu.Unlock()
	st := c.status(t)
	if st.PID < 0 {
		pid, err := c.ids.NewProducerID(ctx)
		if err != nil {
			return 0, 0, err
		}
		next := Status{ID: id, PID: pid, Epoch: 0, LastEpoch: -1, TimeoutMs: int32(timeout.Milliseconds()), State: StateEmpty, StartMs: -1}
		if err := c.persist(ctx, t, next, nil); err != nil {
			return 0, 0, err
		}
		return pid, 0, nil
	}
	if reqPID >= 0 && (reqPID != st.PID || (reqEpoch != st.Epoch && reqEpoch != st.LastEpoch)) {
		return 0, 0, ErrProducerFenced
	}
	switch st.State {
	case StatePrepareCommit, StatePrepareAbort:
		if err := c.complete(ctx, t); err != nil {
			return 0, 0, ErrConcurrentTransactions
		}
	case StateOngoing:
		// The previous producer's transaction is aborted, fenced by the new
		// epoch.
		if err := c.end(ctx, t, false, min(st.Epoch+1, 32767)); err != nil {
			return 0, 0, err
		}
		c.log.Info("open transaction aborted: a new producer took the transactional id", "transactional_id", id, "pid", st.PID)
	}
	st = c.status(t)
	next := st
	next.TimeoutMs = int32(timeout.Milliseconds())
	next.State = StateEmpty
	next.LastEpoch = st.Epoch
	if st.Epoch >= 32766 {
		pid, err := c.ids.NewProducerID(ctx)
		if err != nil {
			return 0, 0, err
		}
		next.PID, next.Epoch, next.LastEpoch = pid, 0, -1
	} else if reqPID < 0 || reqEpoch == st.Epoch {
		next.Epoch = st.Epoch + 1
	}
	if err := c.persist(ctx, t, next, nil); err != nil {
		return 0, 0, err
	}
	return next.PID, next.Epoch, nil
}

// begin validates a request of an open-or-opening transaction and returns
// the state to build on: t.mu is held.
func (c *Coordinator) begin(t *txn, pid int64, epoch int16) (Status, error) {
	st := c.status(t)
	if err := checkProducer(&st, pid, epoch); err != nil {
		return st, err
	}
	switch st.State {
	case StatePrepareCommit, StatePrepareAbort:
		return st, ErrConcurrentTransactions
	case StateOngoing:
		return st, nil
	}
	st.State = StateOngoing
	st.StartMs = c.now()
	st.Partitions, st.Groups, st.Offsets = nil, nil, nil
	return st, nil
}

// AddPartitions adds partitions to the producer's transaction, opening it.
func (c *Coordinator) AddPartitions(ctx context.Context, id string, pid int64, epoch int16, parts []Partition) error {
	t, err := c.locked(id)
	if err != nil {
		return err
	}
	defer t.mu.Unlock()
	next, err := c.begin(t, pid, epoch)
	if err != nil {
		return err
	}
	added := false
	next.Partitions = slices.Clone(next.Partitions)
	for _, p := range parts {
		if !next.hasPartition(p.Queue) {
			next.Partitions = append(next.Partitions, p)
			added = true
		}
	}
	if !added && c.status(t).State == StateOngoing {
		return nil
	}
	return c.persist(ctx, t, next, nil)
}

// AddOffsets adds a consumer group to the producer's transaction.
func (c *Coordinator) AddOffsets(ctx context.Context, id string, pid int64, epoch int16, group string) error {
	t, err := c.locked(id)
	if err != nil {
		return err
	}
	defer t.mu.Unlock()
	next, err := c.begin(t, pid, epoch)
	if err != nil {
		return err
	}
	if slices.Contains(next.Groups, group) && c.status(t).State == StateOngoing {
		return nil
	}
	next.Groups = append(slices.Clone(next.Groups), group)
	return c.persist(ctx, t, next, nil)
}

// CommitOffsets records offsets of group inside the producer's transaction;
// they become the group's committed offsets when it commits.
func (c *Coordinator) CommitOffsets(ctx context.Context, id, group string, pid int64, epoch int16, offsets []PendingOffset) error {
	t, st, err := c.lockedFor(id, pid, epoch)
	if err != nil {
		return err
	}
	defer t.mu.Unlock()
	if st.State != StateOngoing || !slices.Contains(st.Groups, group) {
		return ErrInvalidTxnState
	}
	next := st
	next.Offsets = slices.Clone(st.Offsets)
	for _, o := range offsets {
		o.Group = group
		i := slices.IndexFunc(next.Offsets, func(p PendingOffset) bool { return p.Group == group && p.Queue == o.Queue })
		if i >= 0 {
			next.Offsets[i] = o
		} else {
			next.Offsets = append(next.Offsets, o)
		}
	}
	return c.persist(ctx, t, next, nil)
}

// EndTxn commits or aborts the producer's transaction. A retry of an end
// that completed succeeds.
func (c *Coordinator) EndTxn(ctx context.Context, id string, pid int64, epoch int16, commit bool) error {
	t, st, err := c.lockedFor(id, pid, epoch)
	if err != nil {
		return err
	}
	defer t.mu.Unlock()
	switch st.State {
	case StateOngoing:
		return c.end(ctx, t, commit, st.Epoch)
	case StateCompleteCommit, StateCompleteAbort:
		if (st.State == StateCompleteCommit) == commit {
			return nil
		}
	case StatePrepareCommit, StatePrepareAbort:
		if (st.State == StatePrepareCommit) == commit {
			return c.complete(ctx, t)
		}
	}
	return ErrInvalidTxnState
}
