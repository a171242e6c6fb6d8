package storage

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rosettamq/rosetta/internal/model"
)

const identityName = "identity"

// Identity is the persisted identity of this node's data directory. The
// incarnation grows at every start so a restarted process can be fenced.
type Identity struct {
	ClusterID   model.ClusterID
	NodeID      model.NodeID
	Incarnation int64
}

func loadIdentity(dir string, node model.NodeID) (Identity, error) {
	path := filepath.Join(dir, identityName)
	id := Identity{NodeID: node}
	f, err := os.Open(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return id, fmt.Errorf("cluster id: %w", err)
		}
		id.ClusterID = model.ClusterID(hex.EncodeToString(b[:]))
	case err != nil:
		return id, fmt.Errorf("read identity: %w", err)
	default:
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), "=")
			if !ok {
				continue
			}
			switch k {
			case "cluster.id":
				id.ClusterID = model.ClusterID(v)
			case "node.id":
				n, err := strconv.ParseInt(v, 10, 32)
				if err != nil {
					f.Close()
					return id, fmt.Errorf("%w: identity node.id %q", model.ErrInvalidConfig, v)
				}
				id.NodeID = model.NodeID(n)
			case "incarnation":
				id.Incarnation, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		f.Close()
		if id.NodeID != node {
			return id, fmt.Errorf("%w: data dir belongs to node %d, configured node is %d", model.ErrInvalidConfig, id.NodeID, node)
		}
	}
	id.Incarnation++
	body := fmt.Sprintf("format=1\ncluster.id=%s\nnode.id=%d\nincarnation=%d\n", id.ClusterID, id.NodeID, id.Incarnation)
	if err := writeFileAtomic(path, []byte(body)); err != nil {
		return id, err
	}
	return id, nil
}

// writeFileAtomic writes path through a temporary file, fsync and rename.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", path, err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("sync dir: %w", err)
	}
	defer d.Close()
	return d.Sync()
}
