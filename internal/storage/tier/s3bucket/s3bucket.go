// Package s3bucket is tier.Bucket on an S3-compatible object store (AWS S3,
// MinIO, Ceph RGW, SeaweedFS, versitygw, ...) through the AWS SDK: requests
// are signed by the SDK, objects are written create-only (If-None-Match: *)
// and large ones in parts.
package s3bucket

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/rosettamq/rosetta/internal/storage/tier"
)

// Config says where the bucket is and how to reach it.
type Config struct {
	// Endpoint is the store's URL (http://127.0.0.1:9000); empty means
	// AWS S3 in Region.
	Endpoint string
	Region   string
	Bucket   string
	// Prefix is prepended to every key ("rosetta/<cluster>/" for example).
	Prefix string
	// AccessKey and SecretKey (and SessionToken) are static credentials;
	// when empty the SDK's default chain is used: the AWS_* environment
	// variables, the shared credentials and config files, then the
	// platform's instance or task role.
	AccessKey, SecretKey, SessionToken string
	// PathStyle addresses the bucket in the path (most self-hosted
	// stores) rather than in the host name.
	PathStyle bool
	// TLS configures https endpoints (a private CA, for example).
	TLS *tls.Config
	// PartSize is the size of an upload's parts (default 16 MiB); objects
	// up to it go in one request. S3 needs at least 5 MiB.
	PartSize int64
	// Timeout bounds one request that moves little data (default 30 s);
	// requests moving n bytes get n at MinRate on top of it.
	Timeout time.Duration
	MinRate int64 // bytes per second (default 1 MiB/s)
}

func (c *Config) fill() {
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if c.PartSize == 0 {
		c.PartSize = 16 << 20
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	if c.MinRate == 0 {
		c.MinRate = 1 << 20
	}
}

// Bucket is a tier.Bucket on S3.
type Bucket struct {
	cfg    Config
	client *s3.Client
}

var _ tier.Bucket = (*Bucket)(nil)

// New makes a client for the bucket. It does not contact the store; Check
// does.
func New(ctx context.Context, cfg Config) (*Bucket, error) {
	cfg.fill()
	if cfg.Bucket == "" {
		return nil, fmt.Errorf("s3bucket: no bucket named")
	}
	if cfg.PartSize < 5<<20 {
		return nil, fmt.Errorf("s3bucket: part size %d below S3's 5 MiB minimum", cfg.PartSize)
	}
	httpClient := awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = 5 * time.Second }).
		WithTransportOptions(func(t *http.Transport) {
			if cfg.TLS != nil {
				t.TLSClientConfig = cfg.TLS
			}
			t.ResponseHeaderTimeout = cfg.Timeout
			t.MaxIdleConnsPerHost = 16
		})
	var awsCfg aws.Config
	if cfg.AccessKey != "" {
		awsCfg = aws.Config{
			Region:      cfg.Region,
			Credentials: credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken),
			HTTPClient:  httpClient,
		}
	} else {
		var err error
		awsCfg, err = config.LoadDefaultConfig(ctx, config.WithRegion(cfg.Region), config.WithHTTPClient(httpClient))
		if err != nil {
			return nil, fmt.Errorf("s3bucket: credentials: %w", err)
		}
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		// Not every store accepts the SDK's default checksum trailers.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		o.RetryMaxAttempts = 3
	})
	return &Bucket{cfg: cfg, client: client}, nil
}

// Check reaches the store and the bucket: a missing bucket, wrong
// credentials or an unreachable endpoint are reported here, at start.
func (b *Bucket) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	_, err := b.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &b.cfg.Bucket})
	err = b.wrap("check bucket", "", err)
	if errors.Is(err, tier.ErrObjectNotFound) {
		return fmt.Errorf("%w: bucket %s does not exist: %w", tier.ErrStoreRefused, b.cfg.Bucket, err)
	}
	return err
}

// CreateBucket creates the bucket if it does not exist (tests and
// first-time set-up; production buckets are usually made by an operator).
func (b *Bucket) CreateBucket(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	_, err := b.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &b.cfg.Bucket})
	var owned *types.BucketAlreadyOwnedByYou
	if errors.As(err, &owned) {
		return nil
	}
	return b.wrap("create bucket", "", err)
}

func (b *Bucket) key(k string) *string { return aws.String(b.cfg.Prefix + k) }

func (b *Bucket) timeout(ctx context.Context, n int64) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.cfg.Timeout+time.Duration(n*int64(time.Second)/b.cfg.MinRate))
}

// Create writes the object create-only: in one request when it fits a
// part, else as a multipart upload completed with If-None-Match (aborted
// on any failure) after a look at the key.
func (b *Bucket) Create(ctx context.Context, key string, size int64, body io.Reader) error {
	if size <= b.cfg.PartSize {
		buf := make([]byte, size)
		if _, err := io.ReadFull(body, buf); err != nil {
			return fmt.Errorf("s3bucket: reading %s: %w", key, err)
		}
		rctx, cancel := b.timeout(ctx, size)
		defer cancel()
		_, err := b.client.PutObject(rctx, &s3.PutObjectInput{
			Bucket: &b.cfg.Bucket, Key: b.key(key), Body: bytes.NewReader(buf),
			ContentLength: aws.Int64(size), IfNoneMatch: aws.String("*"),
		})
		return b.wrap("put", key, err)
	}
	// Not every store honours If-None-Match when completing an upload:
	// look first, so a key already written is not uploaded again.
	rctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	_, err := b.client.HeadObject(rctx, &s3.HeadObjectInput{Bucket: &b.cfg.Bucket, Key: b.key(key)})
	cancel()
	if err == nil {
		return fmt.Errorf("%w: %s%s", tier.ErrObjectExists, b.cfg.Prefix, key)
	}
	if err := b.wrap("head", key, err); !errors.Is(err, tier.ErrObjectNotFound) {
		return err
	}
	rctx, cancel = context.WithTimeout(ctx, b.cfg.Timeout)
	up, err := b.client.CreateMultipartUpload(rctx, &s3.CreateMultipartUploadInput{Bucket: &b.cfg.Bucket, Key: b.key(key)})
	cancel()
	if err != nil {
		return b.wrap("create upload", key, err)
	}
	if err := b.uploadParts(ctx, key, up.UploadId, size, body); err != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.Timeout)
		defer cancel()
		_, _ = b.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: &b.cfg.Bucket, Key: b.key(key), UploadId: up.UploadId})
		return err
	}
	return nil
}

func (b *Bucket) uploadParts(ctx context.Context, key string, id *string, size int64, body io.Reader) error {
	buf := make([]byte, b.cfg.PartSize)
	var parts []types.CompletedPart
	for n, left := int32(1), size; left > 0; n++ {
		p := buf[:min(left, b.cfg.PartSize)]
		if _, err := io.ReadFull(body, p); err != nil {
			return fmt.Errorf("s3bucket: reading %s: %w", key, err)
		}
		rctx, cancel := b.timeout(ctx, int64(len(p)))
		out, err := b.client.UploadPart(rctx, &s3.UploadPartInput{
			Bucket: &b.cfg.Bucket, Key: b.key(key), UploadId: id, PartNumber: aws.Int32(n),
			Body: bytes.NewReader(p), ContentLength: aws.Int64(int64(len(p))),
		})
		cancel()
		if err != nil {
			return b.wrap(fmt.Sprintf("upload part %d of", n), key, err)
		}
		parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(n)})
		left -= int64(len(p))
	}
	rctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	_, err := b.client.CompleteMultipartUpload(rctx, &s3.CompleteMultipartUploadInput{
		Bucket: &b.cfg.Bucket, Key: b.key(key), UploadId: id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}, IfNoneMatch: aws.String("*"),
	})
	return b.wrap("complete upload", key, err)
}

// ReadRange reads part of an object.
func (b *Bucket) ReadRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	var rng string
	switch {
	case off < 0:
		rng = fmt.Sprintf("bytes=%d", off)
	case n < 0:
		rng = fmt.Sprintf("bytes=%d-", off)
	case n == 0:
		return nil, nil
	default:
		rng = fmt.Sprintf("bytes=%d-%d", off, off+n-1)
	}
	rctx, cancel := b.timeout(ctx, max(n, -off, 0))
	defer cancel()
	out, err := b.client.GetObject(rctx, &s3.GetObjectInput{Bucket: &b.cfg.Bucket, Key: b.key(key), Range: &rng})
	if err != nil {
		return nil, b.wrap("get", key, err)
	}
	defer out.Body.Close()
	want := n
	if off < 0 {
		want = -off
	}
	var data []byte
	if want > 0 {
		data = make([]byte, 0, want)
	}
	buf := bytes.NewBuffer(data)
	if _, err := buf.ReadFrom(out.Body); err != nil {
		return nil, b.wrap("get", key, err)
	}
	if want > 0 && int64(buf.Len()) != want {
		return nil, fmt.Errorf("%w: get %s %s returned %d bytes", tier.ErrStoreUnavailable, key, rng, buf.Len())
	}
	return buf.Bytes(), nil
}

// List walks the objects under prefix.
func (b *Bucket) List(ctx context.Context, prefix string, fn func(tier.ObjectInfo) bool) error {
	p := s3.NewListObjectsV2Paginator(b.client, &s3.ListObjectsV2Input{Bucket: &b.cfg.Bucket, Prefix: b.key(prefix)})
	for p.HasMorePages() {
		rctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
		page, err := p.NextPage(rctx)
		cancel()
		if err != nil {
			return b.wrap("list", prefix, err)
		}
		for _, o := range page.Contents {
			info := tier.ObjectInfo{Key: strings.TrimPrefix(aws.ToString(o.Key), b.cfg.Prefix), Size: aws.ToInt64(o.Size)}
			if o.LastModified != nil {
				info.Modified = *o.LastModified
			}
			if !fn(info) {
				return nil
			}
		}
	}
	return nil
}

// Delete removes objects, up to a thousand per request.
func (b *Bucket) Delete(ctx context.Context, keys ...string) error {
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		ids := make([]types.ObjectIdentifier, n)
		for i, k := range keys[:n] {
			ids[i] = types.ObjectIdentifier{Key: b.key(k)}
		}
		rctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
		out, err := b.client.DeleteObjects(rctx, &s3.DeleteObjectsInput{
			Bucket: &b.cfg.Bucket, Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
		})
		cancel()
		if err != nil {
			return b.wrap("delete", keys[0], err)
		}
		for _, e := range out.Errors {
			if aws.ToString(e.Code) != "NoSuchKey" {
				return fmt.Errorf("%w: delete %s: %s %s", tier.ErrStoreUnavailable, aws.ToString(e.Key), aws.ToString(e.Code), aws.ToString(e.Message))
			}
		}
		keys = keys[n:]
	}
	return nil
}

// AbortUploads aborts multipart uploads under prefix started before the
// given time (a writer that died mid-upload leaves them, invisible to List
// but paid for).
func (b *Bucket) AbortUploads(ctx context.Context, prefix string, before time.Time) (int, error) {
	in := &s3.ListMultipartUploadsInput{Bucket: &b.cfg.Bucket, Prefix: b.key(prefix)}
	aborted := 0
	for {
		rctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
		out, err := b.client.ListMultipartUploads(rctx, in)
		cancel()
		if err != nil {
			err = b.wrap("list uploads", prefix, err)
			if errors.Is(err, tier.ErrObjectNotFound) {
				return aborted, nil // some stores answer NoSuchUpload when there is none
			}
			return aborted, err
		}
		for _, u := range out.Uploads {
			if u.Initiated != nil && !u.Initiated.Before(before) {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
			_, err := b.client.AbortMultipartUpload(rctx, &s3.AbortMultipartUploadInput{Bucket: &b.cfg.Bucket, Key: u.Key, UploadId: u.UploadId})
			cancel()
			if err := b.wrap("abort upload", aws.ToString(u.Key), err); err != nil && !errors.Is(err, tier.ErrObjectNotFound) {
				return aborted, err
			}
			aborted++
		}
		if !aws.ToBool(out.IsTruncated) {
			return aborted, nil
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}

// wrap maps the SDK's errors to the tier's: lost create races, missing
// objects, refusals that retrying does not fix, and everything else as the
// store being unavailable.
func (b *Bucket) wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	status := 0
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	code := ""
	var api smithy.APIError
	if errors.As(err, &api) {
		code = api.ErrorCode()
	}
	kind := tier.ErrStoreUnavailable
	switch {
	case status == http.StatusPreconditionFailed || code == "PreconditionFailed" || code == "ConditionalRequestConflict":
		kind = tier.ErrObjectExists
	case code == "NoSuchKey" || code == "NoSuchUpload" || (status == http.StatusNotFound && code != "NoSuchBucket"):
		kind = tier.ErrObjectNotFound
	case status == http.StatusConflict && strings.HasPrefix(op, "complete"):
		kind = tier.ErrObjectExists
	case status == http.StatusForbidden || status == http.StatusUnauthorized || code == "NoSuchBucket" ||
		code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" || code == "AccessDenied" ||
		(status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests):
		kind = tier.ErrStoreRefused
	}
	return fmt.Errorf("%w: %s %s%s: %w", kind, op, b.cfg.Prefix, key, err)
}
