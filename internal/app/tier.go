package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
	"github.com/rosettamq/rosetta/internal/storage/tier/s3bucket"
)

// TierConfig configures tiered storage: sealed commit-log segments kept in
// an S3-compatible bucket (storage.tier).
type TierConfig struct {
	Bucket              string        `yaml:"bucket" help:"S3 bucket sealed commit-log segments are tiered to; empty: tiering off"`
	Endpoint            string        `yaml:"endpoint" help:"S3-compatible endpoint URL (http://127.0.0.1:9000 for MinIO, SeaweedFS, versitygw, Ceph RGW); empty: AWS S3 in the region"`
	Region              string        `yaml:"region" help:"the bucket's region"`
	Prefix              string        `yaml:"prefix" help:"key prefix of every object (two clusters sharing a bucket need different ones); empty: the cluster name and a slash"`
	AccessKey           string        `yaml:"access_key" help:"access key id; empty: the AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY environment variables, the shared credentials files or the platform's role"`
	SecretKey           string        `yaml:"secret_key" help:"secret access key (with access_key)"`
	PathStyle           bool          `yaml:"path_style" help:"address the bucket in the URL path (self-hosted stores) rather than in the host name"`
	CAFile              string        `yaml:"ca_file" help:"PEM CA certificates that sign an https endpoint's certificate (default: the system's)"`
	LocalRetention      time.Duration `yaml:"local_retention" help:"a tiered segment leaves local disk once older than this (Kafka local.retention.ms); 0: no time limit"`
	LocalRetentionBytes ByteSize      `yaml:"local_retention_bytes" help:"or once outside the newest this many bytes of a group's log (Kafka local.retention.bytes); 0: no size limit; both 0: as soon as it is tiered"`
	UploadInterval      time.Duration `yaml:"upload_interval" help:"how often sealed segments are looked for and uploaded"`
	CacheBytes          ByteSize      `yaml:"cache_bytes" help:"memory holding what cold reads fetched from the bucket, per group"`
	ChunkBytes          ByteSize      `yaml:"chunk_bytes" help:"bytes of one queue a cold read fetches in one request (read-ahead)"`
	RequestTimeout      time.Duration `yaml:"request_timeout" help:"how long one request to the store may wait for its answer (larger transfers get 1s per MiB on top)"`
	SweepInterval       time.Duration `yaml:"sweep_interval" help:"how often a group's leader deletes the objects its manifest does not name (dropped segments, orphans of deposed leaders)"`
	OrphanGrace         time.Duration `yaml:"orphan_grace" help:"how old an object the manifest does not name must be before a sweep deletes it (an upload still being committed is younger)"`
}

func defaultTierConfig() TierConfig {
	return TierConfig{Region: "us-east-1", PathStyle: true, LocalRetention: 6 * time.Hour, LocalRetentionBytes: 1 << 30,
		UploadInterval: 10 * time.Second, CacheBytes: 256 << 20, ChunkBytes: 4 << 20, RequestTimeout: 30 * time.Second,
		SweepInterval: 10 * time.Minute, OrphanGrace: time.Hour}
}

func (t TierConfig) validate() error {
	if t.Bucket == "" {
		return nil
	}
	if t.LocalRetention < 0 || t.LocalRetentionBytes < 0 || t.UploadInterval <= 0 || t.RequestTimeout <= 0 || t.CacheBytes <= 0 || t.ChunkBytes < 64<<10 {
		return fmt.Errorf("%w: storage.tier: local retention must not be negative, upload_interval, request_timeout and cache_bytes must be positive, chunk_bytes at least 64KiB", model.ErrInvalidConfig)
	}
	if t.SweepInterval <= 0 || t.OrphanGrace < time.Minute {
		return fmt.Errorf("%w: storage.tier: sweep_interval must be positive and orphan_grace at least a minute (an upload being committed must never look orphaned)", model.ErrInvalidConfig)
	}
	return nil
}

// tierStorage makes the bucket client of storage.tier and the engine's
// tiering settings for group 0 (a member's other groups take their own key
// prefix). A node whose store is down at start still serves from local
// storage; uploads retry.
func (c Config) tierStorage(ctx context.Context, log *slog.Logger) (*storage.TierConfig, error) {
	t := c.Storage.Tier
	if t.Bucket == "" {
		return nil, nil
	}
	var tlsCfg *tls.Config
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: storage.tier.ca_file: %w", model.ErrInvalidConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: storage.tier.ca_file holds no PEM certificate", model.ErrInvalidConfig)
		}
		tlsCfg = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	prefix := t.Prefix
	if prefix == "" {
		prefix = c.Cluster.Name + "/"
	}
	b, err := s3bucket.New(ctx, s3bucket.Config{Endpoint: t.Endpoint, Region: t.Region, Bucket: t.Bucket, Prefix: prefix,
		AccessKey: t.AccessKey, SecretKey: t.SecretKey, PathStyle: t.PathStyle, TLS: tlsCfg, Timeout: t.RequestTimeout})
	if err != nil {
		return nil, fmt.Errorf("%w: storage.tier: %w", model.ErrInvalidConfig, err)
	}
	// A bounded look at the store, so that a wrong bucket, wrong
	// credentials or an unreachable endpoint are in the log at start.
	cctx, cancel := context.WithTimeout(ctx, min(5*time.Second, t.RequestTimeout))
	defer cancel()
	if err := b.Check(cctx); err != nil {
		log.Error("tiered storage: the bucket cannot be used; serving from local storage, uploads retry", "bucket", t.Bucket, "endpoint", t.Endpoint, "err", err)
	} else {
		log.Info("tiered storage: bucket reachable", "bucket", t.Bucket, "endpoint", t.Endpoint, "prefix", prefix)
	}
	return &storage.TierConfig{Bucket: b, KeyPrefix: "g0/", UploadInterval: t.UploadInterval,
		LocalRetentionBytes: int64(t.LocalRetentionBytes), LocalRetentionTime: t.LocalRetention,
		CacheBytes: int64(t.CacheBytes), ChunkBytes: int64(t.ChunkBytes), RequestTimeout: t.RequestTimeout + time.Duration(t.ChunkBytes>>20)*time.Second,
		SweepInterval: t.SweepInterval, OrphanGrace: t.OrphanGrace, AwaitFilter: true}, nil
}
