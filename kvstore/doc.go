// Package kvstore is flexps's parameter store: the tables a task declares
// (TableSpec), split into shards hosted by slaves, read and updated by
// workers under a stage's consistency model.
//
// Shards and directory: a table's keys are spread over its Placement's
// hosts by a Directory (range or hash partitioning); call sites never do
// partition arithmetic, they ask the Directory who owns a key, so keys can
// move later. Each shard is a Store, a dense array over its initial keys
// or a sparse hash map of the keys written, in float32 or float64, safe for
// concurrent workers (stripe locks over key ranges for dense
// shards, hashed stripe locks for sparse).
//
// Client side: a worker's Client opens TableClients, which group a call's
// keys by owner, serve keys of the worker's own slave straight from its
// shards' memory, and send one message per remote owner (split below the
// transport's payload limit). Reads wait for all answers; Adds are
// acknowledged asynchronously with at most Window in flight. A CachedTable
// adds a process cache (LRU or LFU) of remote keys, served while the
// consistency model allows and used only while it measures faster than
// the table (cacheGovernor). Scan and ReadAll read whole shards a page at a
// time by each shard's own key set (for writing the model).
//
// Server side: a Server answers the requests addressed to its slave, one
// at a time in arrival order. Messages travel in a compact binary codec
// (Message, AppendMessage, DecodeMessage) over a transport.Transport: NATS
// in a cluster, an in-memory one inside one process; the transport's
// per-sender FIFO is what makes a worker's Adds land before its later Clock
// and Get.
//
// Consistency: every slave hosting a shard keeps a Gate per stage, the
// thread-safe wrapper of a pure Controller that counts worker clocks
// (BSP, SSP, ASP, sparse SSP). Reads a model holds back are parked in the
// gate and answered when the slowest worker catches up; the server's
// handler never blocks. A gate holds reads back, never Adds: a read at
// clock c sees every Add its bound requires and may see newer ones (under
// BSP, Adds of clock c by workers that read before it), as many as timing
// and placement allow. Workers sharing one process's copy of a table
// (single and local worker kinds) use a LocalTable with the lock mode the
// kind needs instead of shards.
package kvstore
