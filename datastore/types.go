package datastore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// Block is a contiguous byte range of one input file: the unit the master's
// FileAssigner hands to workers.
type Block struct {
	Path   string   `json:"path"`   // file path or hdfs:// URL, as Source.Open takes it
	Offset int64    `json:"offset"` // first byte of the range
	Length int64    `json:"length"` // bytes in the range; records straddling the end belong to this block
	Hosts  []string `json:"hosts,omitempty"`
	// Whole is set for inputs that cannot be split (gzip): the block is the
	// whole file and is read from its start regardless of Offset.
	Whole bool `json:"whole,omitempty"`
	// FileSize is the size of the whole file.
	FileSize int64 `json:"file_size"`
}

func (b Block) String() string { return fmt.Sprintf("%s[%d:+%d]", b.Path, b.Offset, b.Length) }

// Source is where input bytes come from.
type Source interface {
	// Blocks expands pattern (a file, a directory, or a glob) into the
	// blocks of its files, each at most blockSize bytes (gzip files are one
	// Whole block). A pattern that matches nothing is an error naming it.
	Blocks(ctx context.Context, pattern string, blockSize int64) ([]Block, error)
	// Open opens path for reading from byte offset.
	Open(ctx context.Context, path string, offset int64) (io.ReadCloser, error)
}

// Records is a batch of parsed records in flat arrays. Record i has label
// Labels[i] and the features Keys[Offsets[i]:Offsets[i+1]] with values
// Vals[Offsets[i]:Offsets[i+1]]. Text records keep their line in Lines.
type Records struct {
	Labels  []float64
	Offsets []int // len(Labels)+1 entries once the first record is added
	Keys    []uint64
	Vals    []float64
	Lines   []string
	// LineNo and Origins locate each record in its file, for errors found
	// after parsing (an id outside a table): LineNo[i] is record i's line,
	// counted like ParseError.Line; Origins are the files, in record
	// order. Both are empty for records built by hand.
	LineNo  []int64
	Origins []Origin
	// state says whether an AsyncReader decoded the batch from the
	// BlockCache (so that Release may reuse it) and whether it was
	// released.
	state batchState
	// cols is the number of fields of the CSV rows parsed into this batch
	// or the earlier batches of its block (0: none yet): a row with
	// another number is refused, not read as if its missing cells were 0.
	cols int
}

type batchState uint8

const (
	batchParsed  batchState = iota // or built by hand: never reused
	batchDecoded                   // handed out by an AsyncReader
	batchFree                      // released to its AsyncReader
)

// Origin is where Records from First on (up to the next Origin) were read:
// a file, and the byte offset of the block their line numbers count from
// (0: the file's start, so the lines are the file's).
type Origin struct {
	Path  string
	First int
	Block int64
	// before counts, when asked, the file's lines before the block's
	// first line (nil: not known; see Records.Where).
	before *linesBefore
}

// linesBefore counts the lines of a file before byte off once, the first
// time a message needs them.
type linesBefore struct {
	src  Source
	path string
	off  int64
	once sync.Once
	n    int64
	err  error
}

func (l *linesBefore) get(ctx context.Context) (int64, error) {
	l.once.Do(func() {
		if l.off > maxLineCount {
			// Every block of a huge file with a bad line would read the
			// file up to itself again: its line within the block does.
			l.err = errors.New("too far into the file to count its lines")
			return
		}
		l.n, l.err = countLines(ctx, l.src, l.path, l.off)
	})
	return l.n, l.err
}

// maxLineCount is how far into a file a block counts the lines before it
// (a local disk reads it in tens of milliseconds).
const maxLineCount = 64 << 20

// Format parses one line (without its trailing newline) into out. A line
// that holds no record (blank, comment) appends nothing and returns nil.
type Format interface {
	Name() string
	ParseLine(line []byte, out *Records) error
}

// ParseError locates a malformed record.
type ParseError struct {
	Path   string
	Line   int64 // 1-based line number in the file (0: unknown)
	Offset int64 // byte offset of the line in the file
	// Without Line: the line's number within the block that starts at
	// byte Block (0: unknown).
	BlockLine, Block int64
	Text             string
	Err              error
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("%s: %v: %q", e.where(), e.Err, e.Text)
}

// where is "path line N (byte B)", or "path byte B" when the line is not
// known.
func (e *ParseError) where() string {
	if e.Line <= 0 && e.BlockLine > 0 {
		return fmt.Sprintf("%s line %d of the block at byte %d (byte %d)", e.Path, e.BlockLine, e.Block, e.Offset)
	}
	if e.Line <= 0 {
		return fmt.Sprintf("%s byte %d", e.Path, e.Offset)
	}
	return fmt.Sprintf("%s line %d (byte %d)", e.Path, e.Line, e.Offset)
}

func (e *ParseError) Unwrap() error { return e.Err }

// ErrNoInput is returned when an input pattern matches no file or only empty files.
var ErrNoInput = errors.New("no input")

// ErrRetryWrite marks a failed write to a Creator that may succeed when
// the file is written again from the start: an HDFS namenode refuses a
// file's next block until a datanode reported the one before
// (NotReplicatedYetException), which Hadoop's own client waits out and
// retries. RetryWrite says how long to wait before each attempt.
var ErrRetryWrite = errors.New("the write may succeed if started again")

// RetryWrite returns the pause before attempt (1, 2, ...) of a write
// that failed with ErrRetryWrite, and false when no attempt is left: 5
// more attempts, 0.4s, 0.8s, 1.6s, 3.2s, 6.4s apart (Hadoop's client
// retries addBlock 5 times from 0.4s).
func RetryWrite(err error, attempt int) (time.Duration, bool) {
	if !errors.Is(err, ErrRetryWrite) || attempt > 5 {
		return 0, false
	}
	return 400 * time.Millisecond << (attempt - 1), true
}

// FormatOptions configures NewFormat. Start from DefaultFormatOptions: the
// zero value reads 0-based LIBSVM ids (IndexBase 0), which is wrong for the
// usual 1-based files.
type FormatOptions struct {
	// IndexBase is the id of the first LIBSVM feature: 1 (the default in
	// DefaultFormatOptions, the LIBSVM convention) or 0 for 0-based files.
	// A feature's key is id - IndexBase.
	IndexBase int `toml:"index_base" json:"index_base"`
	// LabelColumn is the CSV column holding the label (0-based); -1 means
	// the rows have no label (Labels are 0).
	LabelColumn int `toml:"label_column" json:"label_column"`
	// Delimiter separates CSV fields; 0 means ','.
	Delimiter byte `toml:"delimiter" json:"delimiter"`
	// Header makes CSV and ratings inputs skip the first line of every file.
	Header bool `toml:"header" json:"header"`
}

// DefaultFormatOptions returns the defaults: 1-based LIBSVM ids, CSV label
// in column 0, ',' delimiter, no header.
func DefaultFormatOptions() FormatOptions {
	return FormatOptions{IndexBase: 1, LabelColumn: 0, Delimiter: ','}
}

// HeaderSkipper is implemented by formats whose files start with a header
// line. ReadBlock skips the first line of a file (only in the block that
// starts the file) when SkipsHeader reports true; ParseLine never sees it.
type HeaderSkipper interface {
	SkipsHeader() bool
}

// ReadOptions configures ReadBlock.
type ReadOptions struct {
	// BatchRecords is the number of records per emitted batch (default 1024).
	BatchRecords int `toml:"batch_records" json:"batch_records"`
	// OnError is "fail" (the default: stop at the first malformed line with
	// a *ParseError) or "skip" (count malformed lines and go on).
	OnError string `toml:"on_error" json:"on_error"`
	// MaxBadKept is how many malformed lines ReadStats.FirstBad keeps
	// (default 5; negative keeps none).
	MaxBadKept int `toml:"max_bad_kept" json:"max_bad_kept"`
	// MaxBadFraction bounds, with OnError "skip", the share of malformed
	// lines in one pass of an AsyncReader (default 0.01; 1 allows any): a
	// file of the wrong format fails instead of training on nothing.
	MaxBadFraction float64 `toml:"max_bad_fraction" json:"max_bad_fraction"`
}

// DefaultMaxBadFraction is ReadOptions.MaxBadFraction's default.
const DefaultMaxBadFraction = 0.01

// TooManyBadLinesError ends a pass whose malformed lines exceed
// ReadOptions.MaxBadFraction.
type TooManyBadLinesError struct {
	BadLines, Records int64
	MaxFraction       float64
	FirstBad          []string
}

func (e *TooManyBadLinesError) Error() string {
	msg := fmt.Sprintf("datastore: %d of %d lines malformed (%.1f%%, more than max_bad_fraction %g)",
		e.BadLines, e.BadLines+e.Records, 100*float64(e.BadLines)/float64(e.BadLines+e.Records), e.MaxFraction)
	if len(e.FirstBad) > 0 {
		msg += "; first: " + e.FirstBad[0]
	}
	return msg
}

// OnError values.
const (
	OnErrorFail = "fail"
	OnErrorSkip = "skip"
)

func (o ReadOptions) withDefaults() (ReadOptions, error) {
	if o.BatchRecords <= 0 {
		o.BatchRecords = 1024
	}
	switch o.OnError {
	case "":
		o.OnError = OnErrorFail
	case OnErrorFail, OnErrorSkip:
	default:
		return o, fmt.Errorf("datastore: on_error %q: want %q or %q", o.OnError, OnErrorFail, OnErrorSkip)
	}
	if o.MaxBadKept == 0 {
		o.MaxBadKept = 5
	}
	if o.MaxBadKept < 0 {
		o.MaxBadKept = 0
	}
	switch {
	case o.MaxBadFraction == 0:
		o.MaxBadFraction = DefaultMaxBadFraction
	case o.MaxBadFraction < 0 || o.MaxBadFraction > 1 || o.MaxBadFraction != o.MaxBadFraction:
		return o, fmt.Errorf("datastore: max_bad_fraction %v: want a fraction in (0, 1]", o.MaxBadFraction)
	}
	return o, nil
}

// ReadStats counts what ReadBlock did.
type ReadStats struct {
	Bytes    int64    // bytes of the block consumed (the block's Length when it was read to its end)
	Records  int64    // records emitted
	BadLines int64    // malformed lines skipped (OnError "skip")
	FirstBad []string // the first MaxBadKept malformed lines, as "path line N: err"
	// ParseTime is the time spent reading and parsing, excluding the time
	// spent inside emit.
	ParseTime time.Duration
}

// PassStats counts one pass over the data (see AsyncReader and Cache).
type PassStats struct {
	Bytes      int64 // block bytes read
	LocalBytes int64 // of Bytes, bytes of blocks AsyncConfig.IsLocal called local
	Records    int64
	Blocks     int64
	BadLines   int64
	FirstBad   []string
	// WaitTime is the time the consumer spent blocked in Next waiting for data.
	WaitTime time.Duration
	// ParseTime is the producers' reading and parsing time, summed.
	ParseTime time.Duration
	// PeakBuffered is the largest number of parsed bytes the buffer held.
	PeakBuffered int64
	// CachedBlocks counts blocks replayed from the BlockCache (not read).
	CachedBlocks int64
}

// Pass is one pass (epoch) over a worker's share of an input: batches of
// records until io.EOF. *AsyncReader implements it. Records are read-only
// (they may be replayed from the BlockCache in later epochs).
type Pass interface {
	Next(ctx context.Context) (*Records, error)
	Close() error
	Stats() PassStats
}

// Releaser is implemented by passes that reuse the arrays of batches their
// consumer is done with (*AsyncReader: the batches it decodes from the
// BlockCache). After Release(r) the consumer must not touch r again, nor
// release it a second time.
type Releaser interface {
	Release(r *Records)
}
