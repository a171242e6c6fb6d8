package apptest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/rosettamq/rosetta/internal/app"
)

// WithTestBucket starts an in-process S3 server on loopback (closed when
// the test ends) and points c's tiered storage at it: 1 MiB segments, no
// local retention (a tiered segment leaves local disk at the next retention
// pass), uploads only when asked (TierNow), a small cold-read cache. The
// bucket it returns lets a test look at what was stored.
func WithTestBucket(t testing.TB, c *app.Config) *TestBucket {
	t.Helper()
	b := &TestBucket{backend: s3mem.New(), name: "tier"}
	s3 := httptest.NewServer(gofakes3.New(b.backend, gofakes3.WithAutoBucket(true)).Server())
	t.Cleanup(s3.Close)
	tierTestSettings(c, s3.URL, b.name, "test", "secret")
	return b
}

// TestBucket is the in-process bucket of WithTestBucket.
type TestBucket struct {
	backend *s3mem.Backend
	name    string
}

// Objects returns every object in the bucket, by key.
func (b *TestBucket) Objects(t testing.TB) map[string][]byte {
	t.Helper()
	list, err := b.backend.ListBucket(b.name, nil, gofakes3.ListBucketPage{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, c := range list.Contents {
		obj, err := b.backend.GetObject(b.name, c.Key, nil)
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(obj.Contents)
		obj.Contents.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[c.Key] = data
	}
	return out
}

// tierTestSettings points c's tiered storage at a bucket with the test
// settings WithTestBucket describes.
func tierTestSettings(c *app.Config, endpoint, bucket, accessKey, secretKey string) {
	c.Storage.SegmentSize = 1 << 20
	c.Storage.MaxRecordSize = 256 << 10
	tc := &c.Storage.Tier
	tc.Bucket, tc.Endpoint, tc.AccessKey, tc.SecretKey = bucket, endpoint, accessKey, secretKey
	tc.LocalRetention, tc.LocalRetentionBytes = 0, 0
	tc.UploadInterval, tc.CacheBytes, tc.ChunkBytes = time.Hour, 2<<20, 256<<10
}

// TierNow uploads the node's sealed segments and runs a retention pass
// (which deletes the tiered ones locally), returning how many segments are
// tiered and how many of them are still local.
func TierNow(t testing.TB, n *TestNode) (segments, local int) {
	t.Helper()
	for _, path := range []string{"/api/v1/storage/tier/upload", "/api/v1/storage/retention"} {
		resp, err := http.Post("http://"+n.HTTPAddr()+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", path, resp.Status)
		}
	}
	return TierSegments(t, n)
}

// TierSegments reads GET /api/v1/storage/tier: how many segments are
// tiered and how many of them are still local.
func TierSegments(t testing.TB, n *TestNode) (segments, local int) {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/api/v1/storage/tier")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Status struct {
			Segments      int `json:"segments"`
			LocalSegments int `json:"local_segments"`
		} `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return r.Status.Segments, r.Status.LocalSegments
}
