package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/gorxe/gorxe/internal/wrap"
	"github.com/gorxe/gorxe/scene"
)

// sceneOut says where a scene's files go.
type sceneOut struct {
	dir, pcap, html, events string
}

// runScenes is "gorxe demo SCENE": it plays the named scenes (or lists
// them) and writes their files. Flags after the scene's name are parsed
// here, as they were before it.
func runScenes(flags *flag.FlagSet, stdout, stderr io.Writer) int {
	var names []string
	for args := flags.Args(); len(args) > 0; args = flags.Args() {
		names = append(names, args[0])
		if err := flags.Parse(args[1:]); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return exitOK
			}
			return exitUsage
		}
	}
	// The flags before and after the names were parsed into the same set.
	out := sceneOut{dir: flagString(flags, "out"), pcap: flagString(flags, "pcap"), html: flagString(flags, "html"), events: flagString(flags, "events")}
	seed := flags.Lookup("seed").Value.(flag.Getter).Get().(uint64)
	if flags.Lookup("list").Value.String() == "true" {
		for _, s := range scene.Scenes {
			fmt.Fprintf(stdout, "%-17s %s\n%-17s %s\n\n", s.Name, s.Title, "", wrap.Text(s.Teaches, 98, 18))
		}
		return exitOK
	}
	var scenes []*scene.Scene
	for _, n := range names {
		if n == "all" {
			for k := range scene.Scenes {
				scenes = append(scenes, &scene.Scenes[k])
			}
			continue
		}
		s, ok := scene.Find(n)
		if !ok {
			fmt.Fprintf(stderr, "gorxe demo: no scene %q: gorxe demo --list names them\n", n)
			return exitUsage
		}
		scenes = append(scenes, s)
	}
	if len(scenes) > 1 && (out.pcap != "" || out.html != "" || out.events != "") {
		fmt.Fprintln(stderr, "gorxe demo: --pcap, --html and --events take one scene; use --out DIR for several")
		return exitUsage
	}
	code := exitOK
	for k, s := range scenes {
		if k > 0 {
			fmt.Fprintln(stdout)
		}
		res, err := s.Play(seed)
		if err != nil {
			fmt.Fprintf(stderr, "gorxe demo %s: %v\n", s.Name, err)
			return exitError
		}
		var text bytes.Buffer
		if err := res.WriteText(&text); err != nil {
			fmt.Fprintf(stderr, "gorxe demo %s: %v\n", s.Name, err)
			return exitError
		}
		if _, err := stdout.Write(text.Bytes()); err != nil {
			return exitError
		}
		if err := writeScene(res, text.Bytes(), out); err != nil {
			fmt.Fprintf(stderr, "gorxe demo %s: %v\n", s.Name, err)
			return exitError
		}
		if res.Err != nil {
			fmt.Fprintf(stderr, "gorxe demo %s: %v\n", s.Name, res.Err)
			code = exitError
		}
	}
	return code
}

// flagString returns the value of the string flag name.
func flagString(flags *flag.FlagSet, name string) string { return flags.Lookup(name).Value.String() }

// writeScene writes a scene's files where out says.
func writeScene(res *scene.Result, text []byte, out sceneOut) error {
	name := res.Scene.Name
	files := map[string]string{}
	if out.dir != "" {
		if err := os.MkdirAll(out.dir, 0o755); err != nil {
			return err
		}
		for _, ext := range []string{"pcap", "txt", "html", "events.jsonl"} {
			files[ext] = filepath.Join(out.dir, name+"."+ext)
		}
	}
	if out.pcap != "" {
		files["pcap"] = out.pcap
	}
	if out.html != "" {
		files["html"] = out.html
	}
	if out.events != "" {
		files["events.jsonl"] = out.events
	}
	for ext, path := range files {
		var err error
		switch ext {
		case "pcap":
			err = os.WriteFile(path, res.Pcap, 0o644)
		case "txt":
			err = os.WriteFile(path, text, 0o644)
		case "html":
			err = writeHTML(path, res.Report, "gorxe demo "+name+": "+res.Scene.Title)
		case "events.jsonl":
			var b bytes.Buffer
			if err = res.WriteEvents(&b); err == nil {
				err = os.WriteFile(path, b.Bytes(), 0o644)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
