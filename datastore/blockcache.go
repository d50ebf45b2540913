package datastore

import (
	"strings"
	"sync"
)

// BlockCache keeps the parsed records of whole blocks within a memory
// budget, shared by every worker of a slave, so later epochs skip reading
// and parsing. The master's FileAssigner hands a worker the blocks it read
// in the previous epoch first, so epochs after the first mostly hit.
// Blocks are kept encoded (packedBatch: a few bytes per non-zero, against
// 16 for parsed Records) and decoded batch by batch as they are replayed,
// bit for bit the records that were parsed; the budget counts the encoded
// bytes. When the budget is full, new blocks are not admitted (no
// eviction: a pass over data larger than memory would evict exactly what
// the next pass needs first); a block that does not fit is simply re-read
// each epoch.
type BlockCache struct {
	mu     sync.Mutex
	budget int64
	used   int64
	blocks map[cacheKey]*CachedBlock
	hits   int64
	misses int64
	full   bool
}

type cacheKey struct {
	scope          string
	path           string
	offset, length int64
}

// CachedBlock is a block's records as the BlockCache keeps them.
type CachedBlock struct {
	batches []*packedBatch
	records int64
	size    int64
}

// Batches returns the number of batches the block was read in.
func (b *CachedBlock) Batches() int { return len(b.batches) }

// Batch decodes batch i into into, reusing its arrays, or into new Records
// when into is nil, and returns it.
func (b *CachedBlock) Batch(i int, into *Records) *Records { return b.batches[i].unpack(into) }

// Records returns the number of records in the block.
func (b *CachedBlock) Records() int64 { return b.records }

// Bytes returns what the block counts against the cache's budget.
func (b *CachedBlock) Bytes() int64 { return b.size }

// NewBlockCache returns a cache of at most budget bytes of encoded records
// (0 disables it).
func NewBlockCache(budget int64) *BlockCache {
	return &BlockCache{budget: budget, blocks: map[cacheKey]*CachedBlock{}}
}

// Get returns block b as cached under scope (a task and input, say: the
// same file parsed with another format is another entry).
func (c *BlockCache) Get(scope string, b Block) (*CachedBlock, bool) {
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

// Put offers a fully read block, in the batches it was read in; an
// encoded copy is kept if it fits the budget (recs are not changed and
// not retained). A batch that is not well-formed Records (see packBatch)
// keeps the block out.
func (c *BlockCache) Put(scope string, b Block, recs []*Records) bool {
	if c == nil || c.budget <= 0 {
		return false
	}
	k := cacheKey{scope, b.Path, b.Offset, b.Length}
	c.mu.Lock()
	_, have := c.blocks[k]
	full := c.used >= c.budget // nothing more fits: skip the encoding
	c.full = c.full || (full && !have)
	c.mu.Unlock()
	if have {
		return true
	}
	if full {
		return false
	}
	cb := &CachedBlock{batches: make([]*packedBatch, len(recs)), size: blockOverhead}
	for i, r := range recs {
		p, ok := packBatch(r)
		if !ok {
			return false
		}
		cb.batches[i] = p
		cb.records += int64(p.n)
		cb.size += p.bytes()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.blocks[k]; ok {
		return true
	}
	if c.used+cb.size > c.budget {
		c.full = true
		return false
	}
	c.blocks[k] = cb
	c.used += cb.size
	return true
}

// blockOverhead is what a CachedBlock and its map entry cost besides the
// batches.
const blockOverhead = 160

// Drop forgets every block cached under a scope starting with prefix (a
// task that ended).
func (c *BlockCache) Drop(prefix string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, cb := range c.blocks {
		if strings.HasPrefix(k.scope, prefix) {
			c.used -= cb.size
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
