package datastore

import (
	"strings"
	"sync"
)

// BlockCache keeps the parsed records of whole blocks within a memory
// budget, shared by every worker of a slave, so later epochs skip reading
// and parsing. The master's FileAssigner hands a worker the blocks it read
// in the previous epoch first, so epochs after the first mostly hit. Cached
// Records are shared: consumers must treat them as read-only. When the
// budget is full, new blocks are not admitted (no eviction: a pass over
// data larger than memory would evict exactly what the next pass needs
// first); a block that does not fit is simply re-read each epoch.
type BlockCache struct {
	mu     sync.Mutex
	budget int64
	used   int64
	blocks map[cacheKey][]*Records
	hits   int64
	misses int64
	full   bool
}

type cacheKey struct {
	scope          string
	path           string
	offset, length int64
}

// NewBlockCache returns a cache of at most budget bytes of parsed records
// (0 disables it).
func NewBlockCache(budget int64) *BlockCache {
	return &BlockCache{budget: budget, blocks: map[cacheKey][]*Records{}}
}

// Get returns block b's records as cached under scope (a task and input,
// say: the same file parsed with another format is another entry).
func (c *BlockCache) Get(scope string, b Block) ([]*Records, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.blocks[cacheKey{scope, b.Path, b.Offset, b.Length}]
	if ok {
		c.hits++
	} else {
		c.misses++
	}
	return r, ok
}

// Put offers a fully read block; it is kept if it fits the budget, with
// the parser's spare capacity trimmed (Records.Compact): recs itself is
// not changed.
func (c *BlockCache) Put(scope string, b Block, recs []*Records) bool {
	if c == nil || c.budget <= 0 {
		return false
	}
	var size int64
	kept := make([]*Records, len(recs))
	for i, r := range recs {
		kept[i] = r.Compact()
		size += kept[i].Bytes()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := cacheKey{scope, b.Path, b.Offset, b.Length}
	if _, ok := c.blocks[k]; ok {
		return true
	}
	if c.used+size > c.budget {
		c.full = true
		return false
	}
	c.blocks[k] = kept
	c.used += size
	return true
}

// Drop forgets every block cached under a scope starting with prefix (a
// task that ended).
func (c *BlockCache) Drop(prefix string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, recs := range c.blocks {
		if strings.HasPrefix(k.scope, prefix) {
			for _, r := range recs {
				c.used -= r.Bytes()
			}
			delete(c.blocks, k)
		}
	}
}

// BlockCacheStats describe a cache.
type BlockCacheStats struct {
	Used, Budget int64
	Blocks       int
	Hits, Misses int64
	Full         bool // some block did not fit: the data is re-read from the source
}

// Stats returns the cache's counters.
func (c *BlockCache) Stats() BlockCacheStats {
	if c == nil {
		return BlockCacheStats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return BlockCacheStats{Used: c.used, Budget: c.budget, Blocks: len(c.blocks), Hits: c.hits, Misses: c.misses, Full: c.full}
}
