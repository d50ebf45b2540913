// Package checkpoint writes and reads task checkpoints: everything needed
// to continue a task that was stopped (Ctrl-C, a crash, a master restart)
// from where it was, rather than from the start.
//
// A checkpoint is one file, ckpt-NNNNNN.flexps in the task's checkpoint
// directory (local or hdfs://). It is a model file of format 2 (package
// tasks: a JSON header line, the tables in little-endian binary, a
// CRC-32C trailer over all of it) whose header also carries a checkpoint
// record: the format version, a sequence number, the task spec and its
// progress (the stage to run, the epochs of it done, the results of the
// stages before). So a checkpoint can also be scored with flexps eval.
//
// The master takes a checkpoint at a clock boundary: at the end of an
// epoch every worker of a ps stage waits at a barrier (their Adds
// flushed), the master reads each table through the paged shard scan the
// output writer uses, writes the file, and only then releases the
// workers; between stages nothing runs at all. The file is written under
// a temporary name, fsynced and renamed into place (datastore's Create),
// so a reader sees either the whole file or none; the checksum catches
// what the disk or a user did to it afterwards. Latest loads the newest
// file that decodes and passes its checksum, warning about each newer one
// it skips; Write keeps the newest keep of its task's own files (those
// recording its id or one of its lineage, the tasks it was resumed from)
// and deletes its older ones, never another task's. A local dir is held
// by one process at a time (LockDir: an flock on its .flexps-lock, which
// the kernel releases when the process ends); hdfs:// dirs are not
// locked.
package checkpoint
