package datastore

import "context"

// ReadAll parses every record of path (a file, directory, glob or any URL
// a registered source serves) into memory: for evaluation and tests, not
// for training, which streams blocks through an AsyncReader.
func ReadAll(ctx context.Context, path, format string) (*Records, error) {
	return ReadAllWith(ctx, path, format, DefaultFormatOptions())
}

// ReadAllWith is ReadAll with format options (a 0-based LIBSVM file, a
// CSV file's label column, delimiter or header).
func ReadAllWith(ctx context.Context, path, format string, opt FormatOptions) (*Records, error) {
	f, err := NewFormat(format, opt)
	if err != nil {
		return nil, err
	}
	src := NewSources()
	defer src.Close()
	blocks, err := src.Blocks(ctx, path, 0)
	if err != nil {
		return nil, err
	}
	all := &Records{}
	for _, b := range blocks {
		_, err := ReadBlock(ctx, src, b, f, ReadOptions{}, func(r *Records) error {
			all.appendRows(r)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return all, nil
}
