package datastore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// ErrPathNotAllowed is wrapped when a path is outside a router's allowed
// roots. Such a path is never opened, so no error quotes its content.
var ErrPathNotAllowed = errors.New("outside the allowed paths")

// PathPolicy says which paths a process may read and write on behalf of
// submitters: local directories (absolute; symbolic links are resolved, so
// a link inside a root that points outside it is refused) and URL prefixes
// of other schemes (hdfs://nn:8020/data). The zero policy allows every path.
type PathPolicy struct {
	local []string // cleaned, symlink-resolved absolute directories
	urls  []string // scheme://authority/path/ prefixes, lower-case scheme
}

// NewPathPolicy checks and normalizes roots. A local root must exist and
// be a directory.
func NewPathPolicy(roots []string) (*PathPolicy, error) {
	p := &PathPolicy{}
	for _, r := range roots {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		if s := Scheme(r); s != "" && s != "file" {
			u, err := cleanURL(r)
			if err != nil {
				return nil, fmt.Errorf("datastore: allowed path %q: %w", r, err)
			}
			p.urls = append(p.urls, strings.TrimSuffix(u, "/")+"/")
			continue
		}
		dir := trimFileScheme(r)
		if !filepath.IsAbs(dir) {
			return nil, fmt.Errorf("datastore: allowed path %q must be absolute", r)
		}
		real, err := filepath.EvalSymlinks(filepath.Clean(dir))
		if err != nil {
			return nil, fmt.Errorf("datastore: allowed path %q: %w", r, err)
		}
		if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("datastore: allowed path %q is not a directory", r)
		}
		p.local = append(p.local, real)
	}
	return p, nil
}

// Roots lists the policy's roots, for messages.
func (p *PathPolicy) Roots() []string {
	if p == nil {
		return nil
	}
	return append(append([]string(nil), p.local...), p.urls...)
}

// Check returns nil when p allows path (a file, directory or glob pattern;
// for a pattern, its directory part is checked, and the router checks each
// file it expands to).
func (p *PathPolicy) Check(pth string) error {
	if p == nil || len(p.local)+len(p.urls) == 0 {
		return nil
	}
	deny := func() error {
		return fmt.Errorf("datastore: %s: %w (%s); a cluster's allowed_paths setting lists where tasks may read and write",
			pth, ErrPathNotAllowed, strings.Join(p.Roots(), ", "))
	}
	if s := Scheme(pth); s != "" && s != "file" {
		u, err := cleanURL(pth)
		if err != nil {
			return deny()
		}
		for _, root := range p.urls {
			if u+"/" == root || strings.HasPrefix(u, root) {
				return nil
			}
		}
		return deny()
	}
	local := trimFileScheme(pth)
	if !filepath.IsAbs(local) {
		abs, err := filepath.Abs(local)
		if err != nil {
			return deny()
		}
		local = abs
	}
	real, err := resolveExisting(filepath.Clean(globDir(local)))
	if err != nil {
		return deny()
	}
	for _, root := range p.local {
		if real == root || strings.HasPrefix(real, root+string(filepath.Separator)) {
			return nil
		}
	}
	return deny()
}

// globDir cuts a pattern at its first path element holding a glob
// character: what is left names real directories.
func globDir(p string) string {
	i := strings.IndexAny(p, "*?[")
	if i < 0 {
		return p
	}
	return filepath.Dir(p[:i] + "x")
}

// resolveExisting resolves symbolic links in the longest existing prefix
// of p (an output file need not exist yet) and appends the rest.
func resolveExisting(p string) (string, error) {
	rest := ""
	for {
		real, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(real, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(p)
		if parent == p {
			return "", err
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

// cleanURL lower-cases the scheme and cleans the path of scheme://auth/path,
// refusing ".." segments.
func cleanURL(u string) (string, error) {
	i := strings.Index(u, "://")
	scheme, rest := strings.ToLower(u[:i]), u[i+3:]
	auth, p := rest, "/"
	if j := strings.IndexByte(rest, '/'); j >= 0 {
		auth, p = rest[:j], rest[j:]
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return "", errors.New("'..' in a URL path")
		}
	}
	return scheme + "://" + strings.ToLower(auth) + path.Clean(p), nil
}
