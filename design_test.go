package bridge_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDesignMapsEveryPackage: docs/DESIGN.md's package table ("###
// Packages") names every package of the module — each directory with a
// non-test Go file, as `go list ./...` lists them, nested modules apart —
// and no package that is gone.
func TestDesignMapsEveryPackage(t *testing.T) {
	design, err := os.ReadFile("docs/DESIGN.md")
	require.NoError(t, err)
	doc := string(design)
	start := strings.Index(doc, "### Packages")
	require.NotEqual(t, -1, start, "DESIGN.md has a ### Packages section")
	end := start + len("### Packages") + strings.Index(doc[start+len("### Packages"):], "\n#")
	documented := map[string]bool{}
	cell := regexp.MustCompile("`([a-z][a-z0-9/_-]*)`")
	for _, line := range strings.Split(doc[start:end], "\n") {
		first, _, ok := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		if !ok || !strings.HasPrefix(line, "| ") {
			continue
		}
		if strings.HasPrefix(first, "root `bridge`") {
			documented["."] = true
			continue
		}
		for _, m := range cell.FindAllStringSubmatch(first, -1) {
			documented[m[1]] = true
		}
	}

	var packages []string
	require.NoError(t, filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
			return fs.SkipDir
		}
		if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != "." {
			return fs.SkipDir // a module of its own (producer, consumer, examples)
		}
		if hasGoFile(t, path) {
			packages = append(packages, filepath.ToSlash(path))
		}
		return nil
	}))
	for _, p := range packages {
		if !documented[p] {
			t.Errorf("package %s is missing from docs/DESIGN.md's package table", p)
		}
	}
	for p := range documented {
		if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && p != "." {
			continue // a module of its own, documented beside the packages
		}
		if !slices.Contains(packages, p) {
			t.Errorf("docs/DESIGN.md's package table names %s, which is not a package", p)
		}
	}
}

// hasGoFile reports whether dir holds a Go file that is not a test.
func hasGoFile(t *testing.T, dir string) bool {
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".go") && !strings.HasSuffix(e.Name(), "_test.go") {
			return true
		}
	}
	return false
}
