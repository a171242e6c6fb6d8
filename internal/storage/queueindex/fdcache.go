package queueindex

import (
	"container/list"
	"os"
	"sync"
)

// fdCache shares open index files among readers and writers and keeps at most
// limit of them open. A file in use is never closed under its user.
type fdCache struct {
	limit int

	mu    sync.Mutex
	files map[string]*cachedFile
	lru   *list.List // of *cachedFile with refs == 0, most recent at front
}

type cachedFile struct {
	path string
	f    *os.File
	refs int
	elem *list.Element
}

func newFDCache(limit int) *fdCache {
	return &fdCache{limit: limit, files: map[string]*cachedFile{}, lru: list.New()}
}

// get opens (or reuses) path; create makes it if missing. Call put when done.
func (c *fdCache) get(path string, create bool) (*cachedFile, error) {
	c.mu.Lock()
	if cf, ok := c.files[path]; ok {
		if cf.elem != nil {
			c.lru.Remove(cf.elem)
			cf.elem = nil
		}
		cf.refs++
		c.mu.Unlock()
		return cf, nil
	}
	c.mu.Unlock()
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cf, ok := c.files[path]; ok { // raced with another opener
		f.Close()
		if cf.elem != nil {
			c.lru.Remove(cf.elem)
			cf.elem = nil
		}
		cf.refs++
		return cf, nil
	}
	cf := &cachedFile{path: path, f: f, refs: 1}
	c.files[path] = cf
	c.evictLocked()
	return cf, nil
}

func (c *fdCache) put(cf *cachedFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cf.refs--
	if cf.refs == 0 {
		cf.elem = c.lru.PushFront(cf)
		c.evictLocked()
	}
}

func (c *fdCache) evictLocked() {
	for len(c.files) > c.limit {
		back := c.lru.Back()
		if back == nil {
			return
		}
		cf := back.Value.(*cachedFile)
		c.lru.Remove(back)
		delete(c.files, cf.path)
		cf.f.Close()
	}
}

// forget closes and drops path if nobody uses it (before deleting the file).
func (c *fdCache) forget(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cf, ok := c.files[path]; ok && cf.refs == 0 {
		c.lru.Remove(cf.elem)
		delete(c.files, path)
		cf.f.Close()
	}
}

// closeAll closes every cached file.
func (c *fdCache) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, cf := range c.files {
		cf.f.Close()
		delete(c.files, p)
	}
	c.lru.Init()
}

// open returns the number of open files.
func (c *fdCache) open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.files)
}
