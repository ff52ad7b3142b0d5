package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

// TestVersion checks that "gorxe version" and "gorxe --version" print one
// line naming the build and the Go that made it, and exit 0.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"version", "--version"} {
		var out, errOut bytes.Buffer
		code := run([]string{arg}, &out, &errOut)
		line := out.String()
		if code != exitOK || !strings.HasPrefix(line, "gorxe ") || !strings.HasSuffix(line, " "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH+"\n") || strings.Count(line, "\n") != 1 || errOut.Len() > 0 {
			t.Errorf("gorxe %s: exit %d, stdout %q, stderr %q", arg, code, line, errOut.String())
		}
	}
}
