package assign

import (
	"cmp"
	"math/rand/v2"
	"slices"

	"github.com/flexps/flexps/datastore"
)

// Random is the locality-blind baseline: blocks shuffled with seed and dealt
// round-robin to the workers in rank order, so every worker gets an equal
// count regardless of where the blocks live. It returns rank -> blocks.
func Random(blocks []datastore.Block, workers []Worker, seed uint64) map[int][]datastore.Block {
	out := map[int][]datastore.Block{}
	if len(workers) == 0 {
		return out
	}
	ws := slices.Clone(workers)
	slices.SortStableFunc(ws, func(a, b Worker) int { return cmp.Compare(a.Rank, b.Rank) })
	shuffled := slices.Clone(blocks)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for i, b := range shuffled {
		r := ws[i%len(ws)].Rank
		out[r] = append(out[r], b)
	}
	return out
}

// Locality sums the bytes of an assignment (rank -> blocks) and the bytes
// that have a replica on their worker's host, to compare policies.
func Locality(assignment map[int][]datastore.Block, workers []Worker) (localBytes, totalBytes int64) {
	host := map[int]string{}
	for _, w := range workers {
		host[w.Rank] = w.Host
	}
	for r, bs := range assignment {
		for _, b := range bs {
			totalBytes += b.Length
			if h := host[r]; h != "" && slices.Contains(b.Hosts, h) {
				localBytes += b.Length
			}
		}
	}
	return localBytes, totalBytes
}
