package cluster_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rosettamq/rosetta/internal/app"
	"github.com/rosettamq/rosetta/internal/app/apptest"
)

const (
	// envTier: the members tier to the versitygw at this endpoint
	// (bucket "tier"), with envTierSegmentMB segments (1) and
	// envTierLocalMB of local retention (4).
	envTier          = "ROSETTA_CLUSTER_TIER"
	envTierSegmentMB = "ROSETTA_CLUSTER_TIER_SEGMENT_MB"
	envTierLocalMB   = "ROSETTA_CLUSTER_TIER_LOCAL_MB"
	// envTierDiskMB: the disk guard sees a disk of this many MiB holding
	// the member's storage directories, with 4 MiB kept free.
	envTierDiskMB = "ROSETTA_CLUSTER_TIER_DISK_MB"
	// envTierQuickSweep: the leader sweeps every 2 s, deleting objects
	// the manifest does not name once a minute old.
	envTierQuickSweep = "ROSETTA_CLUSTER_TIER_QUICK_SWEEP"
)

// tierChildConfig points a member's tiered storage at the test's store
// (and serves the admin API on httpPort).
func tierChildConfig(cfg *app.Config, httpPort string) {
	ep := os.Getenv(envTier)
	if ep == "" {
		return
	}
	cfg.Listen.HTTP = ":" + httpPort
	segMB, localMB := envInt(envTierSegmentMB, 1), envInt(envTierLocalMB, 4)
	cfg.Storage.SegmentSize, cfg.Storage.MaxRecordSize = app.ByteSize(segMB)<<20, 512<<10
	tc := &cfg.Storage.Tier
	tc.Bucket, tc.Endpoint, tc.AccessKey, tc.SecretKey, tc.PathStyle = "tier", ep, apptest.VersityAccessKey, apptest.VersitySecretKey, true
	tc.LocalRetention, tc.LocalRetentionBytes = 0, app.ByteSize(localMB)<<20
	tc.UploadInterval, tc.RequestTimeout = time.Second, 10*time.Second
	if os.Getenv(envTierQuickSweep) != "" {
		tc.SweepInterval, tc.OrphanGrace = 2*time.Second, time.Minute
	}
	if mb := envInt(envTierDiskMB, 0); mb > 0 {
		dir, total := cfg.DataDir, int64(mb)<<20
		cfg.Storage.MinFreeBytes = 4 << 20
		cfg.Storage.StatDisk = func() (int64, int64, error) { return total, max(0, total-storageBytes(dir)), nil }
	}
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// storageBytes is what a member's storage directories hold on disk (the
// disk guard's measure under envTierDiskMB).
func storageBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(path, string(filepath.Separator)+"storage"+string(filepath.Separator)) {
			return nil
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}
