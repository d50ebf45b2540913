// Package datastore turns training data into parsed records for workers.
//
// Data lives behind a Source (local disk here; HDFS in package
// datastore/hdfs, routed by URL scheme through Sources) that lists an input's
// blocks (contiguous byte ranges, with the hosts that hold a replica) and
// opens a byte range of a file. A Format is a line parser (LIBSVM, CSV,
// ratings, text) that appends into Records, a batch of records held in flat
// arrays so that parsing allocates nothing per record. ReadBlock reads one
// block record by record with the Hadoop rule that makes every record belong
// to exactly one block: a block that does not start a file skips the partial
// line it starts in, and a block reads through the line that straddles its
// end. The AsyncReader prefetches blocks into a buffer bounded in bytes while
// workers consume, and a slave's BlockCache keeps parsed blocks for later epochs
// when they fit in a memory budget, encoded (packedBatch: varint key deltas,
// each float column in its smallest exact form) and decoded batch by batch on
// replay into the arrays of batches the consumer released.
package datastore
