package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// dataset is the generated rating matrix, in flexps's ratings format
// (user<TAB>item<TAB>rating, 0-based ids) and in Lapse's (Matrix Market
// coordinate, 1-based) under lapseDir as train.mmc and test.mmc.
type dataset struct {
	train, test string // flexps inputs; train is sorted by user
	lapseDir    string // Lapse's --dataset prefix (ends in /)
	rows        int64  // training ratings
	testRows    int64
	trainBytes  int64
}

// inputBlock is the input block size of the jobs: about 32 blocks per
// worker (each DSGD sub-epoch waits for the slowest worker, and a worker
// pulls whole blocks: with 1 MiB blocks the 2M-rating file made 29 blocks,
// so one of 4 workers trained 8/7 of the others' share), between 64 KiB
// and 1 MiB.
func (d dataset) inputBlock(workers int) int64 {
	b := d.trainBytes / int64(32*max(workers, 1))
	return min(max(b, 64<<10), 1<<20) &^ 1023
}

// prepare writes the data once per size: a data directory named after the
// parameters is reused by later runs with the same ones.
func prepare(o opts, flexps string) (dataset, error) {
	dir := filepath.Join(o.dir, fmt.Sprintf("data-u%d-i%d-n%d-s%d", o.users, o.items, o.rows, o.seed))
	d := dataset{train: filepath.Join(dir, "train.sorted.tsv"), test: filepath.Join(dir, "test.tsv"),
		lapseDir: filepath.Join(dir, "lapse") + "/"}
	if err := os.MkdirAll(d.lapseDir, 0o755); err != nil {
		return d, err
	}
	raw := filepath.Join(dir, "train.tsv")
	if !exists(d.train) || !exists(d.test) {
		logf("generating %d ratings (%d users x %d items, hidden rank %d) in %s", o.rows, o.users, o.items, o.hiddenRank, dir)
		cmd := exec.Command(flexps, "gen", "ratings", "--out", raw, "--test-out", d.test,
			"--rows", strconv.FormatInt(o.rows, 10), "--test-rows", strconv.FormatInt(o.rows/10, 10),
			"--users", strconv.Itoa(o.users), "--items", strconv.Itoa(o.items), "--rank", strconv.Itoa(o.hiddenRank),
			"--noise", "0.1", "--seed", strconv.Itoa(o.seed))
		if out, err := cmd.CombinedOutput(); err != nil {
			return d, fmt.Errorf("flexps gen: %w\n%s", err, out)
		}
		// Parameter blocking wants each worker's ratings to cover few
		// users: group by user, as rating exports usually are. -s keeps
		// the generated order within a user.
		tmp := d.train + ".tmp"
		cmd = exec.Command("sort", "-n", "-k1,1", "-s", "-S", "25%", "-o", tmp, raw)
		cmd.Env = append(os.Environ(), "LC_ALL=C")
		if out, err := cmd.CombinedOutput(); err != nil {
			return d, fmt.Errorf("sort %s: %w\n%s", raw, err, out)
		}
		if err := os.Rename(tmp, d.train); err != nil {
			return d, err
		}
		if err := os.Remove(raw); err != nil {
			return d, err
		}
	}
	st, err := os.Stat(d.train)
	if err != nil {
		return d, err
	}
	d.trainBytes = st.Size()
	for _, c := range []struct {
		in, out string
		n       *int64
	}{{d.train, d.lapseDir + "train.mmc", &d.rows}, {d.test, d.lapseDir + "test.mmc", &d.testRows}} {
		if *c.n, err = toMMC(c.in, c.out, o.users, o.items); err != nil {
			return d, err
		}
	}
	return d, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// toMMC converts a ratings file to Matrix Market coordinate format
// (1-based ids), as Lapse's apps/mf/io.h reads it; it returns the number
// of ratings. An existing output is kept (its count is read from its
// header).
func toMMC(in, out string, users, items int) (int64, error) {
	if exists(out) {
		return mmcCount(out)
	}
	f, err := os.Open(in)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var body bytes.Buffer
	sc := bufio.NewScanner(f)
	var n int64
	buf := make([]byte, 0, 64)
	for sc.Scan() {
		line := sc.Bytes()
		n++
		t1 := bytes.IndexByte(line, '\t')
		t2 := t1 + 1 + bytes.IndexByte(line[t1+1:], '\t')
		if t1 < 0 || t2 <= t1 {
			return 0, fmt.Errorf("%s:%d: want user<TAB>item<TAB>rating, got %q", in, n, line)
		}
		u, err1 := strconv.ParseInt(string(line[:t1]), 10, 64)
		i, err2 := strconv.ParseInt(string(line[t1+1:t2]), 10, 64)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("%s:%d: bad ids in %q", in, n, line)
		}
		buf = strconv.AppendInt(buf[:0], u+1, 10)
		buf = append(buf, ' ')
		buf = strconv.AppendInt(buf, i+1, 10)
		buf = append(buf, ' ')
		buf = append(buf, line[t2+1:]...)
		buf = append(buf, '\n')
		body.Write(buf)
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("%s: %w", in, err)
	}
	w, err := os.Create(out + ".tmp")
	if err != nil {
		return 0, err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	fmt.Fprintf(bw, "%%%%MatrixMarket matrix coordinate real general\n%% flexps bench/lapse, from %s\n%d %d %d\n", filepath.Base(in), users, items, n)
	if _, err := body.WriteTo(bw); err != nil {
		w.Close()
		return 0, err
	}
	if err := bw.Flush(); err != nil {
		w.Close()
		return 0, err
	}
	if err := w.Close(); err != nil {
		return 0, err
	}
	return n, os.Rename(out+".tmp", out)
}

func mmcCount(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if len(line) > 0 && line[0] == '%' {
			continue
		}
		var r, c, n int64
		if _, err := fmt.Sscan(line, &r, &c, &n); err != nil {
			return 0, fmt.Errorf("%s: header %q: %w", path, line, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("%s: no size line", path)
}
