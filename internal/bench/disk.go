package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Disk measures the data disk's sequential write bandwidth with an fdatasync
// after every block (1 MiB: the yardstick for the storage targets; a few
// KiB: the fsync latency that bounds acknowledged sync sends).
func Disk(dir string, total int64, block int) (*Report, error) {
	if block <= 0 {
		block = 1 << 20
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "rosetta-disk-bench.tmp")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	defer os.Remove(path)
	defer f.Close()
	buf := make([]byte, block)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	start := time.Now()
	var lats []time.Duration
	for n := int64(0); n < total; n += int64(len(buf)) {
		t0 := time.Now()
		if _, err := f.Write(buf); err != nil {
			return nil, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return nil, err
		}
		lats = append(lats, time.Since(t0))
	}
	el := time.Since(start)
	return &Report{Name: fmt.Sprintf("disk: sequential %d B writes + fdatasync each, %d MiB", block, total>>20),
		Bytes: total, Elapsed: el, Latencies: lats}, nil
}

func syncKill() error { return syscall.Kill(os.Getpid(), syscall.SIGKILL) }
