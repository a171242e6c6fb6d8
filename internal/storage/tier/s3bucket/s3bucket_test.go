package s3bucket

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/rosettamq/rosetta/internal/storage/tier"
)

// fakeStore starts an in-process S3 server on loopback and returns a bucket
// client for it (the bucket created).
func fakeStore(t *testing.T, prefix string) (*Bucket, string) {
	t.Helper()
	srv := httptest.NewServer(gofakes3.New(s3mem.New()).Server())
	t.Cleanup(srv.Close)
	b := newBucket(t, Config{Endpoint: srv.URL, Bucket: "tier", Prefix: prefix, AccessKey: "test", SecretKey: "secret", PathStyle: true, PartSize: 5 << 20})
	if err := b.CreateBucket(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := b.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	return b, srv.URL
}

func newBucket(t *testing.T, cfg Config) *Bucket {
	t.Helper()
	b, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestCreateReadListDelete(t *testing.T) {
	ctx := t.Context()
	b, _ := fakeStore(t, "cluster-a/")
	small := randomBytes(100_000, 1)
	if err := b.Create(ctx, "g1/obj1", int64(len(small)), bytes.NewReader(small)); err != nil {
		t.Fatal(err)
	}
	if err := b.Create(ctx, "g1/obj1", 5, bytes.NewReader([]byte("other"))); !errors.Is(err, tier.ErrObjectExists) {
		t.Fatalf("second create of a key: %v", err)
	}
	for _, c := range []struct{ off, n int64 }{{0, 100_000}, {10, 1}, {99_999, 1}, {500, 4096}, {-48, 0}, {90_000, -1}} {
		got, err := b.ReadRange(ctx, "g1/obj1", c.off, c.n)
		if err != nil {
			t.Fatalf("range %+v: %v", c, err)
		}
		var want []byte
		switch {
		case c.off < 0:
			want = small[len(small)+int(c.off):]
		case c.n < 0:
			want = small[c.off:]
		default:
			want = small[c.off : c.off+c.n]
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("range %+v: %d bytes differ", c, len(got))
		}
	}
	if _, err := b.ReadRange(ctx, "g1/missing", 0, 10); !errors.Is(err, tier.ErrObjectNotFound) {
		t.Fatalf("read of a missing object: %v", err)
	}

	// Larger than a part: a multipart upload, completed create-only.
	large := randomBytes(12<<20+123, 2)
	if err := b.Create(ctx, "g1/obj2", int64(len(large)), bytes.NewReader(large)); err != nil {
		t.Fatal(err)
	}
	got, err := b.ReadRange(ctx, "g1/obj2", 5<<20-10, 20)
	if err != nil || !bytes.Equal(got, large[5<<20-10:5<<20+10]) {
		t.Fatalf("range across a part boundary: %v", err)
	}
	if err := b.Create(ctx, "g1/obj2", int64(len(large)), bytes.NewReader(large)); !errors.Is(err, tier.ErrObjectExists) {
		t.Fatalf("second multipart create of a key: %v", err)
	}
	if n, err := b.AbortUploads(ctx, "", time.Now().Add(time.Minute)); err != nil || n != 0 {
		t.Fatalf("a refused upload left %d uploads behind: %v", n, err)
	}

	if err := b.Create(ctx, "g2/obj3", 3, bytes.NewReader([]byte("abc"))); err != nil {
		t.Fatal(err)
	}
	var keys []string
	if err := b.List(ctx, "g1/", func(o tier.ObjectInfo) bool { keys = append(keys, o.Key); return true }); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0] != "g1/obj1" || keys[1] != "g1/obj2" {
		t.Fatalf("listed %v", keys)
	}
	if err := b.Delete(ctx, "g1/obj1", "g1/obj2", "g1/never"); err != nil {
		t.Fatal(err)
	}
	keys = nil
	_ = b.List(ctx, "", func(o tier.ObjectInfo) bool { keys = append(keys, o.Key); return true })
	if len(keys) != 1 || keys[0] != "g2/obj3" {
		t.Fatalf("after delete listed %v", keys)
	}
}

// TestAbortUploads: an upload begun and never completed (a writer that
// died) is found and aborted.
func TestAbortUploads(t *testing.T) {
	ctx := t.Context()
	b, _ := fakeStore(t, "p/")
	body := &failingReader{data: randomBytes(6<<20, 3)}
	if err := b.Create(ctx, "g1/dead", 11<<20, body); err == nil {
		t.Fatal("an upload whose body failed succeeded")
	}
	// Create aborted its own upload; start one the way a killed writer
	// leaves it.
	if _, err := b.client.CreateMultipartUpload(ctx, mpuInput(b, "g1/killed")); err != nil {
		t.Fatal(err)
	}
	if n, err := b.AbortUploads(ctx, "g1/", time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("aborted %d uploads younger than the cut-off: %v", n, err)
	}
	if n, err := b.AbortUploads(ctx, "g1/", time.Now().Add(time.Minute)); err != nil || n != 1 {
		t.Fatalf("aborted %d uploads: %v", n, err)
	}
	if n, _ := b.AbortUploads(ctx, "g1/", time.Now().Add(time.Minute)); n != 0 {
		t.Fatalf("aborted %d uploads again", n)
	}
}

// TestStoreErrors: a missing bucket is refused, an unreachable store is
// unavailable — both at Check, the start-up probe.
func TestStoreErrors(t *testing.T) {
	_, url := fakeStore(t, "")
	missing := newBucket(t, Config{Endpoint: url, Bucket: "nope", AccessKey: "test", SecretKey: "secret", PathStyle: true})
	if err := missing.Check(t.Context()); !errors.Is(err, tier.ErrStoreRefused) {
		t.Fatalf("missing bucket: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	down := newBucket(t, Config{Endpoint: "http://" + addr, Bucket: "tier", AccessKey: "test", SecretKey: "secret", PathStyle: true, Timeout: 2 * time.Second})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := down.Check(ctx); !errors.Is(err, tier.ErrStoreUnavailable) {
		t.Fatalf("unreachable store: %v", err)
	}
	if _, err := New(t.Context(), Config{Bucket: "x", PartSize: 1 << 20, AccessKey: "a"}); err == nil {
		t.Fatal("accepted a part size below 5 MiB")
	}
}

// failingReader returns its data, then an error.
type failingReader struct {
	data []byte
	off  int
}

func (r *failingReader) Read(p []byte) (int, error) {
	if r.off == len(r.data) {
		return 0, errors.New("disk read failed")
	}
	n := copy(p, r.data[r.off:])
	r.off += n
	return n, nil
}

func mpuInput(b *Bucket, key string) *s3.CreateMultipartUploadInput {
	return &s3.CreateMultipartUploadInput{Bucket: &b.cfg.Bucket, Key: b.key(key)}
}
