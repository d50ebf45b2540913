// Package synth writes seeded synthetic training data: LIBSVM rows labelled
// by a hidden linear model (for logistic regression) and low-rank ratings
// (for matrix factorization). The same config and seed always give the same
// bytes, so tests, benchmarks and `flexps gen` can reproduce a data set.
package synth

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
)

// LIBSVMConfig describes a binary classification data set.
type LIBSVMConfig struct {
	Rows int
	Dim  int
	NNZ  int // non-zeros per row (at most Dim)
	// Zipf skews feature ids: s > 1 (e.g. 1.1) makes a few ids hot, spread
	// over the whole [0, Dim); 0 draws ids uniformly.
	Zipf  float64
	Seed  int64
	Noise float64 // probability of flipping a label
	// IndexBase is the id written for key 0; 0 means the LIBSVM default 1.
	// Set ZeroBased to write 0-based ids (read them with index_base = 0).
	IndexBase int
	ZeroBased bool
}

// WriteLIBSVM writes cfg.Rows rows "label id:val ..." with labels 0/1 and
// returns the hidden weights. A row has NNZ distinct ids, written sorted,
// with values uniform in (0,1]; its label is 1 when w·x plus a little
// Gaussian noise exceeds the median score (estimated from a sample drawn
// with a separate stream), so the classes are balanced, and is then flipped
// with probability Noise.
func WriteLIBSVM(w io.Writer, cfg LIBSVMConfig) (weights []float64, err error) {
	if cfg.Rows < 0 || cfg.Dim <= 0 || cfg.NNZ <= 0 || cfg.NNZ > cfg.Dim {
		return nil, fmt.Errorf("synth: libsvm rows %d dim %d nnz %d: want rows >= 0 and 0 < nnz <= dim", cfg.Rows, cfg.Dim, cfg.NNZ)
	}
	// Written as what is wanted, so NaN is refused too: a NaN exponent
	// drew uniform ids, an infinite one never returned from rand.Zipf,
	// a NaN noise flipped no label.
	if !(cfg.Zipf == 0 || cfg.Zipf > 1 && !math.IsInf(cfg.Zipf, 1)) {
		return nil, fmt.Errorf("synth: zipf %v: want a finite s > 1, or 0 for uniform ids", cfg.Zipf)
	}
	if !(cfg.Noise >= 0 && cfg.Noise <= 1) {
		return nil, fmt.Errorf("synth: noise %v: want a probability", cfg.Noise)
	}
	base := uint64(1)
	if cfg.ZeroBased {
		base = 0
	} else if cfg.IndexBase > 0 {
		base = uint64(cfg.IndexBase)
	}
	seed := uint64(cfg.Seed)
	wr := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	weights = make([]float64, cfg.Dim)
	for j := range weights {
		weights[j] = wr.NormFloat64()
	}

	// Centre the weights so that the expected score is 0: then the label
	// rule "w·x + noise > 0" is linear without an intercept and balanced.
	// Inclusion frequencies come from a sample drawn with its own stream,
	// so the written rows do not depend on the sample size.
	sample := newRowGen(cfg, seed^0x5bd1e995)
	counts := make([]float64, cfg.Dim)
	const sampleRows = 4000
	for range sampleRows {
		sample.next()
		for _, id := range sample.ids {
			counts[id]++
		}
	}
	c := 0.0
	for j, n := range counts {
		c += n * weights[j]
	}
	c /= float64(sampleRows * cfg.NNZ)
	for j := range weights {
		weights[j] -= c
	}
	scores := make([]float64, 1001)
	for i := range scores {
		sample.next()
		scores[i] = sample.score(weights)
	}
	slices.Sort(scores)
	sigma := 0.05 * (scores[len(scores)*3/4] - scores[len(scores)/4])

	g := newRowGen(cfg, seed)
	noise := rand.New(rand.NewPCG(seed, 0x2545f4914f6cdd1d))
	bw := bufio.NewWriterSize(w, 1<<16)
	buf := make([]byte, 0, 64+cfg.NNZ*32)
	for range cfg.Rows {
		g.next()
		y := 0
		if g.score(weights)+sigma*noise.NormFloat64() > 0 {
			y = 1
		}
		if cfg.Noise > 0 && noise.Float64() < cfg.Noise {
			y = 1 - y
		}
		buf = append(buf[:0], byte('0'+y))
		for k, id := range g.ids {
			buf = append(buf, ' ')
			buf = strconv.AppendUint(buf, id+base, 10)
			buf = append(buf, ':')
			buf = appendFrac4(buf, g.vals[k])
		}
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			return nil, err
		}
	}
	return weights, bw.Flush()
}

// rowGen draws rows: distinct ids (uniform, or Zipf-ranked and then mapped
// through a seeded permutation so hot ids are spread over [0, Dim)).
type rowGen struct {
	cfg  LIBSVMConfig
	rng  *rand.Rand
	zipf *rand.Zipf
	perm []uint32
	seen []uint32 // seen[id] == row+1 when id is in the current row
	row  uint32
	ids  []uint64
	vals []float64
}

func newRowGen(cfg LIBSVMConfig, seed uint64) *rowGen {
	g := &rowGen{
		cfg:  cfg,
		rng:  rand.New(rand.NewPCG(seed, 0xda3e39cb94b95bdb)),
		seen: make([]uint32, cfg.Dim),
		ids:  make([]uint64, 0, cfg.NNZ),
		vals: make([]float64, cfg.NNZ),
	}
	if cfg.Zipf > 1 {
		g.zipf = rand.NewZipf(g.rng, cfg.Zipf, 1, uint64(cfg.Dim-1))
		// The permutation depends on the data set's seed only, so the
		// sample and the rows agree on which ids are hot.
		pr := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x94d049bb133111eb))
		g.perm = make([]uint32, cfg.Dim)
		for i := range g.perm {
			g.perm[i] = uint32(i)
		}
		pr.Shuffle(len(g.perm), func(i, j int) { g.perm[i], g.perm[j] = g.perm[j], g.perm[i] })
	}
	return g
}

func (g *rowGen) next() {
	g.row++
	g.ids = g.ids[:0]
	tries := 0
	for len(g.ids) < g.cfg.NNZ {
		var id uint64
		if g.zipf != nil && tries < 64*g.cfg.NNZ {
			id = uint64(g.perm[g.zipf.Uint64()])
		} else {
			id = g.rng.Uint64N(uint64(g.cfg.Dim))
		}
		tries++
		if g.seen[id] == g.row {
			continue
		}
		g.seen[id] = g.row
		g.ids = append(g.ids, id)
	}
	slices.Sort(g.ids)
	for k := range g.vals {
		g.vals[k] = math.Round((1-g.rng.Float64())*1e4) / 1e4 // (0,1], as written

		if g.vals[k] == 0 {
			g.vals[k] = 1e-4
		}
	}
}

func (g *rowGen) score(w []float64) float64 {
	s := 0.0
	for k, id := range g.ids {
		s += w[id] * g.vals[k]
	}
	return s
}

// RatingsConfig describes a low-rank rating matrix sample.
type RatingsConfig struct {
	Users, Items, Rank, Ratings int
	Seed                        int64
	Noise                       float64 // standard deviation of Gaussian noise added to each rating
	Min, Max                    float64 // ratings are clamped to [Min, Max] (default 1..5)
}

// WriteRatings writes cfg.Ratings lines "user\titem\trating\n" (0-based ids,
// pairs drawn uniformly, so a pair may repeat). A rating is the middle of
// [Min, Max] plus a scaled dot product of seeded Gaussian user and item
// factors plus noise, clamped and rounded to two decimals.
func WriteRatings(w io.Writer, cfg RatingsConfig) error {
	if cfg.Users <= 0 || cfg.Items <= 0 || cfg.Rank <= 0 || cfg.Ratings < 0 {
		return fmt.Errorf("synth: ratings users %d items %d rank %d ratings %d: want positive sizes", cfg.Users, cfg.Items, cfg.Rank, cfg.Ratings)
	}
	if !(cfg.Noise >= 0) || math.IsInf(cfg.Noise, 1) {
		// NaN wrote NaN ratings, which no reader takes.
		return fmt.Errorf("synth: ratings noise %v: want a finite standard deviation >= 0", cfg.Noise)
	}
	if cfg.Min == 0 && cfg.Max == 0 {
		cfg.Min, cfg.Max = 1, 5
	}
	if cfg.Max <= cfg.Min {
		return errors.New("synth: ratings max must exceed min")
	}
	seed := uint64(cfg.Seed)
	rng := rand.New(rand.NewPCG(seed, 0x8cb92ba72f3d8dd7))
	k := cfg.Rank
	scale := 1 / math.Sqrt(math.Sqrt(float64(k))) // u·v then has variance 1
	u := make([]float64, cfg.Users*k)
	v := make([]float64, cfg.Items*k)
	for i := range u {
		u[i] = rng.NormFloat64() * scale
	}
	for i := range v {
		v[i] = rng.NormFloat64() * scale
	}
	mid, half := (cfg.Min+cfg.Max)/2, (cfg.Max-cfg.Min)/2
	bw := bufio.NewWriterSize(w, 1<<16)
	buf := make([]byte, 0, 64)
	for range cfg.Ratings {
		a := rng.IntN(cfg.Users)
		b := rng.IntN(cfg.Items)
		dot := 0.0
		for f := range k {
			dot += u[a*k+f] * v[b*k+f]
		}
		r := mid + half*0.5*dot + cfg.Noise*rng.NormFloat64()
		r = math.Round(min(cfg.Max, max(cfg.Min, r))*100) / 100
		buf = strconv.AppendInt(buf[:0], int64(a), 10)
		buf = append(buf, '\t')
		buf = strconv.AppendInt(buf, int64(b), 10)
		buf = append(buf, '\t')
		buf = strconv.AppendFloat(buf, r, 'f', -1, 64)
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// appendFrac4 writes v in (0,1], a multiple of 1e-4, as "1" or "0.dddd".
func appendFrac4(buf []byte, v float64) []byte {
	n := int(math.Round(v * 1e4))
	if n >= 10000 {
		return append(buf, '1')
	}
	return append(buf, '0', '.', byte('0'+n/1000), byte('0'+n/100%10), byte('0'+n/10%10), byte('0'+n%10))
}
