package test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestFuzzTargetsListed checks that the Makefile's FUZZ_TARGETS, which
// make fuzz and make test run, names every fuzz target in the tree and
// no other, so a new one cannot be written and never run.
func TestFuzzTargetsListed(t *testing.T) {
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^FUZZ_TARGETS := (.*)$`).FindSubmatch(mk)
	if line == nil {
		t.Fatal("the Makefile has no FUZZ_TARGETS line")
	}
	listed := strings.Fields(string(line[1]))
	var found []string
	decl := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(`)
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() != ".." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllSubmatch(src, -1) {
			found = append(found, "./"+filepath.ToSlash(filepath.Dir(strings.TrimPrefix(path, "../")))+":"+string(m[1]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(listed)
	slices.Sort(found)
	for _, f := range found {
		if !slices.Contains(listed, f) {
			t.Errorf("fuzz target %s is not in the Makefile's FUZZ_TARGETS", f)
		}
	}
	for _, l := range listed {
		if !slices.Contains(found, l) {
			t.Errorf("FUZZ_TARGETS names %s, which is no fuzz target", l)
		}
	}
	if len(found) == 0 {
		t.Error("found no fuzz target in the tree")
	}
}
