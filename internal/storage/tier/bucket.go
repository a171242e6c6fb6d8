package tier

import (
	"context"
	"errors"
	"io"
	"time"
)

// Errors a Bucket returns, wrapped with what the store said.
var (
	// ErrObjectExists: a create-only write found the key taken (another
	// writer won the race, or an earlier attempt of this one landed).
	ErrObjectExists = errors.New("tier: object exists")
	// ErrObjectNotFound: no object at the key.
	ErrObjectNotFound = errors.New("tier: object not found")
	// ErrStoreUnavailable: the store did not answer, or answered that it
	// cannot now (5xx, throttling, timeouts); retrying later may succeed.
	ErrStoreUnavailable = errors.New("tier: object store unavailable")
	// ErrStoreRefused: the store refused the request for a reason retrying
	// does not fix (credentials, permissions, a missing bucket).
	ErrStoreRefused = errors.New("tier: object store refused the request")
)

// ObjectInfo is one listed object.
type ObjectInfo struct {
	Key      string
	Size     int64
	Modified time.Time
}

// Bucket is the object store as tiering uses it: create-only writes, ranged
// reads, listing and deletion under one bucket. Keys are relative to the
// bucket's configured prefix.
type Bucket interface {
	// Create writes an object of size bytes read from body, only if no
	// object has the key (ErrObjectExists otherwise, as far as the store
	// enforces conditional writes). Large objects go up in parts; a failed
	// upload leaves no visible object.
	Create(ctx context.Context, key string, size int64, body io.Reader) error
	// ReadRange returns n bytes of the object from off (n < 0: to the end;
	// off < 0: the last -off bytes).
	ReadRange(ctx context.Context, key string, off, n int64) ([]byte, error)
	// List calls fn for each object whose key begins with prefix, in key
	// order, until fn returns false.
	List(ctx context.Context, prefix string, fn func(ObjectInfo) bool) error
	// Delete removes objects; a missing one is not an error.
	Delete(ctx context.Context, keys ...string) error
	// AbortUploads aborts unfinished multipart uploads under prefix begun
	// before the given time, returning how many it aborted.
	AbortUploads(ctx context.Context, prefix string, before time.Time) (int, error)
}
