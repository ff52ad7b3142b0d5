package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorxe/gorxe/explain"
	"github.com/gorxe/gorxe/scene"
)

// TestDemoList checks that --list names every scene and what it teaches.
func TestDemoList(t *testing.T) {
	code, out, errOut := runDemoArgs(t, "--list")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, s := range scene.Scenes {
		if !strings.Contains(out, s.Name) || !strings.Contains(out, s.Title) {
			t.Errorf("--list lacks %s (%s):\n%s", s.Name, s.Title, out)
		}
	}
}

// TestDemoScene plays a scene with a seed and --out, twice: the printed
// text is the same both times and is in SCENE.txt, the capture decodes
// and explains to the same packets, the events are JSON Lines, and the
// ladder diagram is written.
func TestDemoScene(t *testing.T) {
	var outs [2]string
	for k := range outs {
		dir := t.TempDir()
		code, out, errOut := runDemoArgs(t, "loss", "--seed", "5", "--out", dir)
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		outs[k] = out
		txt, err := os.ReadFile(filepath.Join(dir, "loss.txt"))
		if err != nil || string(txt) != out {
			t.Fatalf("loss.txt: %v, or it differs from what was printed", err)
		}
		for _, want := range []string{"gorxe demo loss (seed 5)", "NAK, PSN sequence error", "go-back-N", "It never arrived", "go back to PSN"} {
			if !strings.Contains(out, want) {
				t.Errorf("the output lacks %q:\n%s", want, out)
			}
		}
		var dec bytes.Buffer
		f, err := os.Open(filepath.Join(dir, "loss.pcap"))
		if err != nil {
			t.Fatal(err)
		}
		sum, err := decode(&dec, f, false)
		f.Close()
		if err != nil || sum.RoCE == 0 || sum.BadICRC != 0 || sum.Malformed != 0 {
			t.Errorf("decode loss.pcap: %v, %+v", err, sum)
		}
		ev, err := os.ReadFile(filepath.Join(dir, "loss.events.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(ev)), "\n")
		for _, l := range lines {
			if !json.Valid([]byte(l)) {
				t.Errorf("events: not JSON: %s", l)
			}
		}
		if !strings.Contains(string(ev), `"kind":"nak_sent"`) {
			t.Errorf("events lack the NAK:\n%s", ev)
		}
		html, err := os.ReadFile(filepath.Join(dir, "loss.html"))
		if err != nil || !bytes.Contains(html, []byte("<svg")) {
			t.Errorf("loss.html: %v, %d bytes", err, len(html))
		}
	}
	if outs[0] != outs[1] {
		t.Errorf("two runs with seed 5 differ")
	}
	if code, out, _ := runDemoArgs(t, "loss", "--seed", "6"); code != exitOK || out == outs[0] {
		t.Errorf("seed 6: exit %d, same output as seed 5: %v", code, out == outs[0])
	}
}

// TestDemoSceneFlags checks the flags' errors.
func TestDemoSceneFlags(t *testing.T) {
	if code, _, errOut := runDemoArgs(t, "loss", "rnr", "--html", filepath.Join(t.TempDir(), "x.html")); code != exitUsage || !strings.Contains(errOut, "one scene") {
		t.Errorf("--html with two scenes: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runDemoArgs(t, "--html", "x.html"); code != exitUsage || !strings.Contains(errOut, "for a scene") {
		t.Errorf("--html without a scene: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runDemoArgs(t, "all", "--out", t.TempDir()); code != exitOK {
		t.Errorf("all: exit %d, %q", code, errOut)
	}
}

// TestExplainCommand runs gorxe explain on a scene's capture, as text, as
// JSON and with --html, and on files that are not captures.
func TestExplainCommand(t *testing.T) {
	dir := t.TempDir()
	if code, _, errOut := runDemoArgs(t, "rnr", "--out", dir); code != exitOK {
		t.Fatalf("demo: exit %d: %s", code, errOut)
	}
	pcap := filepath.Join(dir, "rnr.pcap")
	var stdout, stderr bytes.Buffer
	html := filepath.Join(dir, "x.html")
	if code := run([]string{"explain", "--html", html, pcap}, &stdout, &stderr); code != exitOK {
		t.Fatalf("explain: exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "RNR NAK (receiver not ready)") || !strings.Contains(stdout.String(), "connection 1: RC") {
		t.Errorf("explain's text:\n%s", stdout.String())
	}
	if b, err := os.ReadFile(html); err != nil || !bytes.Contains(b, []byte(`id="report"`)) {
		t.Errorf("--html: %v", err)
	}
	stdout.Reset()
	if code := run([]string{"explain", "--json", pcap}, &stdout, &stderr); code != exitOK {
		t.Fatalf("explain --json: exit %d", code)
	}
	var r explain.Report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil || len(r.Packets) == 0 || r.Conns[0].Summary.RNRNAKs[1] != 2 {
		t.Errorf("explain --json: %v, %+v", err, r.Conns)
	}
	notCapture := filepath.Join(dir, "x.txt")
	os.WriteFile(notCapture, []byte("hello"), 0o644)
	stderr.Reset()
	if code := run([]string{"explain", notCapture}, &stdout, &stderr); code != exitError || !strings.Contains(stderr.String(), "not a pcap") {
		t.Errorf("not a capture: exit %d, %q", code, stderr.String())
	}
	if code := run([]string{"explain"}, &stdout, &stderr); code != exitUsage {
		t.Errorf("no file: exit %d", code)
	}
}
