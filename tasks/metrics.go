package tasks

// Metric names. A stage function reports an epoch's metrics with
// Info.ReportEpoch under these names; the master sums each over the stage's
// workers, and printers, the metrics file and `flexps plot` derive what
// they show from the sums (loss = MetricLossSum / MetricSamples, accuracy =
// MetricCorrect / MetricSamples, rmse = sqrt(MetricSqErrSum /
// MetricSamples), ...). Report only what the algorithm measures: a
// regression reports squared errors, not a "correct" count.
const (
	MetricSamples   = "samples"     // training records processed in the epoch
	MetricLossSum   = "loss_sum"    // summed training loss (log-loss for classifiers)
	MetricCorrect   = "correct"     // correctly classified training records
	MetricSqErrSum  = "sq_err_sum"  // summed squared training error (regression)
	MetricAbsErrSum = "abs_err_sum" // summed absolute training error (regression)

	MetricTestSamples   = "test_samples"
	MetricTestLossSum   = "test_loss_sum"
	MetricTestCorrect   = "test_correct"
	MetricTestSqErrSum  = "test_sq_err_sum"
	MetricTestAbsErrSum = "test_abs_err_sum"

	// Ranking (link prediction): per test rank, summed over ranks
	// (MetricTestSamples counts the ranks).
	MetricTestRRSum  = "test_rr_sum" // summed reciprocal ranks (mrr = sum / ranks)
	MetricTestHits1  = "test_hits1"  // ranks <= 1
	MetricTestHits3  = "test_hits3"  // ranks <= 3
	MetricTestHits10 = "test_hits10" // ranks <= 10

	// MetricObjective is an objective value the stage computed over the
	// whole data (k-means: mean squared distance to the nearest center;
	// SVRG: regularized training loss). Summed over workers like every
	// metric, so each worker reports its share.
	MetricObjective = "objective"
)

// Metrics the engine measures for every worker and reports in the stage
// summary (status.StageResult.Metrics), summed over the stage's workers.
const (
	MetricReadBytes        = "read_bytes"         // input bytes read
	MetricReadLocalBytes   = "read_local_bytes"   // of which from a replica on the worker's host
	MetricReadWaitSeconds  = "read_wait_seconds"  // time a worker waited for parsed input
	MetricReadRecords      = "read_records"       // records parsed
	MetricReadBlocks       = "read_blocks"        // blocks read
	MetricReadCachedBlocks = "read_cached_blocks" // of which replayed from the slave's parsed-data cache
	MetricBadLines         = "bad_lines"          // malformed lines skipped (on_error = "skip")

	MetricConsistencyReads = "consistency_reads" // reads the consistency gate checked
	MetricConsistencyWaits = "consistency_waits" // of which had to wait
	MetricBlockedSeconds   = "blocked_seconds"   // time reads waited for slower workers

	MetricCacheHits      = "cache_hits" // process cache
	MetricCacheMisses    = "cache_misses"
	MetricCacheEvictions = "cache_evictions"
	MetricCacheStale     = "cache_stale"
	MetricCacheBypassed  = "cache_bypassed"  // reads sent straight to the table: the cache did not pay
	MetricCacheRefreshed = "cache_refreshed" // cached keys fetched ahead beside a read's own

	MetricKVLocalKeys  = "kv_local_keys"  // keys read or written in this slave's memory
	MetricKVRemoteKeys = "kv_remote_keys" // keys read or written on other slaves
	MetricKVRequests   = "kv_requests"    // data-plane messages sent
	MetricKVBytesSent  = "kv_bytes_sent"  // data-plane bytes sent
	// Relocation (Localize). The slave-wide ones are reported once per
	// slave (by its first worker of the stage).
	MetricKVLocalized = "kv_localized_keys"      // keys workers asked to move to their slave
	MetricKVFlushes   = "kv_route_flushes"       // waits for in-flight Adds because keys moved
	MetricKVRelocated = "kv_relocated_keys"      // keys that arrived on the slaves during the stage
	MetricKVOwnedKeys = "kv_owned_keys"          // keys in the slaves' memory at the stage's end
	MetricKVGuestKeys = "kv_guest_keys"          // of which moved there from their home slave
	MetricKVLocalizes = "kv_localize_requests"   // Localize calls that moved keys
	MetricKVRelocMsgs = "kv_relocation_messages" // protocol messages (localize, transfer, values) sent
	// MetricKVLocalizeLatency + "NN" counts Localize calls that took
	// [2^NN, 2^(NN+1)) microseconds (a histogram the master sums over
	// slaves; tasks.LatencyQuantile reads it).
	MetricKVLocalizeLatency = "kv_localize_us_b"

	MetricModelLoadSeconds      = "model_load_seconds"      // one-slave stages: loading the model
	MetricModelWritebackSeconds = "model_writeback_seconds" // one-slave stages: writing it back
)

// LatencyQuantile is the q-quantile (0..1) in microseconds of the
// Localize latency histogram in metrics (MetricKVLocalizeLatency
// buckets), as the upper edge of the bucket that holds it; 0 when empty.
func LatencyQuantile(metrics map[string]float64, q float64) float64 {
	var counts [64]float64
	var total float64
	for k, v := range metrics {
		if len(k) == len(MetricKVLocalizeLatency)+2 && k[:len(MetricKVLocalizeLatency)] == MetricKVLocalizeLatency {
			b := int(k[len(k)-2]-'0')*10 + int(k[len(k)-1]-'0')
			if b >= 0 && b < len(counts) {
				counts[b] += v
				total += v
			}
		}
	}
	if total == 0 {
		return 0
	}
	need, seen := q*total, 0.0
	for b, n := range counts {
		seen += n
		if seen >= need && n > 0 {
			return float64(uint64(1) << (b + 1))
		}
	}
	return 0
}
