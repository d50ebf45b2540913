package tasks

import (
	"maps"
	"os"
	"slices"
	"strings"
)

// OverwrittenInput is the name of the input one of whose files (files
// lists each input's) is output, the same file by any path, or "". The
// output's own path is what the model replaces: a link there is
// replaced, not the file it points to. The master refuses such a task
// at submission; flexps run and submit check it first, to name the
// job file's output line.
func OverwrittenInput(output string, files map[string][]string) string {
	if output == "" {
		return ""
	}
	url := strings.Contains(output, "://")
	var out os.FileInfo
	if !url {
		fi, err := os.Lstat(output)
		if err != nil {
			return "" // no file there to write over
		}
		out = fi
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		for _, p := range files[name] {
			if url {
				if strings.TrimRight(p, "/") == strings.TrimRight(output, "/") {
					return name
				}
			} else if fi, err := os.Stat(p); err == nil && os.SameFile(fi, out) {
				return name
			}
		}
	}
	return ""
}
