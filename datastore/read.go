package datastore

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"
)

const readBufferSize = 1 << 20

var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufferSize) }}

// lineReader returns lines of any length: lines that fit the bufio buffer
// are returned in place, longer ones are assembled in long.
type lineReader struct {
	br   *bufio.Reader
	long []byte
}

// next returns the next line without its "\n" or "\r\n" and the number of
// bytes it took in the stream. It returns io.EOF only when no bytes remain.
func (l *lineReader) next() (line []byte, n int, err error) {
	s, err := l.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		l.long = append(l.long[:0], s...)
		for err == bufio.ErrBufferFull {
			s, err = l.br.ReadSlice('\n')
			l.long = append(l.long, s...)
		}
		s = l.long
	}
	n = len(s)
	if err != nil && err != io.EOF {
		return nil, n, err
	}
	if n == 0 {
		return nil, 0, io.EOF
	}
	if s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
		if len(s) > 0 && s[len(s)-1] == '\r' {
			s = s[:len(s)-1]
		}
	}
	return s, n, nil
}

const maxErrText = 200

// ReadBlock parses block b of src with f and passes batches of about
// opt.BatchRecords records to emit, which takes ownership of each batch.
//
// Every line belongs to exactly one block (Hadoop's LineRecordReader rule):
// a block with Offset > 0 opens at Offset-1 and discards through the first
// '\n' (so a block that starts exactly at a line start loses nothing), then
// reads every line that starts before Offset+Length, including the one that
// straddles the end. A Whole block is read from the start of its file, and
// decompressed when its path ends in ".gz". A format that skips a header
// (HeaderSkipper) has the first line of the file dropped, by the block that
// starts the file only.
//
// A malformed line stops the read with a *ParseError (OnError "fail") or is
// counted and skipped (OnError "skip"). ParseError.Offset is the exact byte
// offset of the line in the file (in the decompressed stream for gzip).
// ParseError.Line is the true 1-based line number in the file: a block
// that does not start the file counts the lines before it when it meets
// its first malformed line (reading the file up to the block once; 0 if
// that read fails or the block starts past maxLineCount, and then
// BlockLine counts from the block's first line).
//
// ctx is checked between batches.
func ReadBlock(ctx context.Context, src Source, b Block, f Format, opt ReadOptions, emit func(*Records) error) (st ReadStats, err error) {
	t0 := time.Now()
	var emitTime time.Duration
	defer func() { st.ParseTime = time.Since(t0) - emitTime }()

	if opt, err = opt.withDefaults(); err != nil {
		return st, err
	}
	if err := ctx.Err(); err != nil {
		return st, err
	}
	starts := b.Whole || b.Offset == 0
	var openAt int64
	if !starts {
		openAt = b.Offset - 1
	}
	rc, err := src.Open(ctx, b.Path, openAt)
	if err != nil {
		return st, fmt.Errorf("datastore: open %s: %w", b.Path, err)
	}
	defer rc.Close()
	var r io.Reader = rc
	if b.Whole && strings.HasSuffix(b.Path, ".gz") {
		gz, err := gzip.NewReader(rc)
		if err != nil {
			return st, gzipErr(b.Path, err)
		}
		defer gz.Close()
		r = gz
	}
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(r)
	defer func() {
		br.Reset(nil)
		readerPool.Put(br)
	}()
	lr := lineReader{br: br}

	end := b.Offset + b.Length
	if b.Whole {
		end = math.MaxInt64
	}
	pos := openAt
	readErr := func(err error) error {
		if b.Whole && strings.HasSuffix(b.Path, ".gz") {
			return gzipErr(b.Path, err)
		}
		return fmt.Errorf("datastore: read %s: %w", b.Path, err)
	}
	consumed := func() int64 {
		if b.Whole {
			return min(pos, b.Length)
		}
		return max(0, min(pos, end)-b.Offset)
	}

	var lineNo int64
	// fileLine is the line number in the file of the block's line rel:
	// for a block that does not start the file, rel plus the lines before
	// the block's first line, counted once, when a malformed line needs
	// them (0: unknown).
	var before *linesBefore // set once the block's first line is found
	fileLine := func(rel int64) int64 {
		if starts {
			return rel
		}
		n, err := before.get(ctx)
		if err != nil {
			return 0
		}
		return n + rel
	}
	if !starts {
		_, n, err := lr.next() // the tail of the previous block's last line
		pos += int64(n)
		before = &linesBefore{src: src, path: b.Path, off: pos}
		if err == io.EOF {
			st.Bytes = b.Length
			return st, nil
		} else if err != nil {
			st.Bytes = consumed()
			return st, readErr(err)
		}
	} else if hs, ok := f.(HeaderSkipper); ok && hs.SkipsHeader() && pos < end {
		_, n, err := lr.next()
		pos += int64(n)
		lineNo++
		if err != nil && err != io.EOF {
			st.Bytes = consumed()
			return st, readErr(err)
		}
	}

	_, text := f.(textFormat)
	origin := Origin{Path: b.Path}
	if !starts {
		origin.Block, origin.before = b.Offset, before
	}
	cur := newBatch(opt.BatchRecords, nil, text)
	cur.Origins = []Origin{origin} // each batch its own: Reset reuses it
	flush := func(last bool) error {
		st.Records += int64(cur.Len())
		te := time.Now()
		err := emit(cur)
		emitTime += time.Since(te)
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if last {
			return nil
		}
		cur = newBatch(opt.BatchRecords, cur, text)
		cur.Origins = []Origin{origin} // each batch its own: Reset reuses it
		return nil
	}

	for pos < end {
		line, n, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			st.Bytes = consumed()
			return st, readErr(err)
		}
		start := pos
		pos += int64(n)
		lineNo++
		if start == 0 {
			// A UTF-8 byte order mark (Windows editors, Excel) marks the
			// file, it is not part of the first record.
			line = bytes.TrimPrefix(line, utf8BOM)
		}
		before := cur.Len()
		if perr := f.ParseLine(line, cur); perr != nil {
			if opt.OnError == OnErrorSkip {
				st.BadLines++
				if len(st.FirstBad) < opt.MaxBadKept {
					st.FirstBad = append(st.FirstBad, (&ParseError{Path: b.Path, Line: fileLine(lineNo), Offset: start,
						BlockLine: lineNo, Block: b.Offset, Err: perr}).where()+": "+perr.Error())
				}
				continue
			}
			st.Bytes = consumed()
			t := line
			if len(t) > maxErrText {
				t = t[:maxErrText]
			}
			return st, &ParseError{Path: b.Path, Line: fileLine(lineNo), Offset: start, BlockLine: lineNo, Block: b.Offset, Text: string(t), Err: perr}
		}
		for range cur.Len() - before {
			cur.LineNo = append(cur.LineNo, lineNo)
		}
		if cur.Len() >= opt.BatchRecords {
			if err := flush(false); err != nil {
				st.Bytes = consumed()
				return st, err
			}
		}
	}
	if cur.Len() > 0 {
		if err := flush(true); err != nil {
			st.Bytes = consumed()
			return st, err
		}
	}
	st.Bytes = b.Length
	return st, nil
}

var utf8BOM = []byte("\xef\xbb\xbf")

// gzipErr is err of reading path, a ".gz" file. compress/gzip's own
// errors say "gzip: " already ("datastore: x.gz: gzip: gzip: invalid
// header" before); a file that does not start as gzip data is said to be
// none.
func gzipErr(path string, err error) error {
	switch {
	case errors.Is(err, gzip.ErrHeader):
		return fmt.Errorf("datastore: %s: not gzip data, though its name ends in .gz (%w)", path, err)
	case strings.HasPrefix(err.Error(), "gzip: "):
		return fmt.Errorf("datastore: %s: %w", path, err)
	}
	return fmt.Errorf("datastore: %s: gzip: %w", path, err)
}

// countLines counts the '\n's of path before byte off: the lines before a
// line that starts at off.
func countLines(ctx context.Context, src Source, path string, off int64) (int64, error) {
	rc, err := src.Open(ctx, path, 0)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	buf := make([]byte, 256<<10)
	var n, read int64
	for read < off {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		k, err := rc.Read(buf[:min(int64(len(buf)), off-read)])
		n += int64(bytes.Count(buf[:k], []byte{'\n'}))
		read += int64(k)
		if err == io.EOF && read < off {
			return 0, io.ErrUnexpectedEOF
		} else if err != nil && err != io.EOF {
			return 0, err
		}
	}
	return n, nil
}
