package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// microResult is BenchmarkProfileLookupRatio from pkg/controller: looking up
// the sessions of one profile through the profileRef index versus scanning
// every cached session, at 7,340 sessions over 500 profiles.
type microResult struct {
	indexNs, scanNs, ratio float64
	command                string
	err                    error
}

func runMicro(root string) microResult {
	args := []string{"test", "-run", "^$", "-bench", "^BenchmarkProfileLookupRatio$", "-count", "1", "./pkg/controller/"}
	r := microResult{command: "go " + strings.Join(args, " ")}
	cmd := exec.Command(goBinary(), args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.err = fmt.Errorf("%s: %w\n%s", r.command, err, out)
		return r
	}
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(line, "BenchmarkProfileLookupRatio") {
			continue
		}
		f := strings.Fields(line)
		for i := 1; i+1 < len(f); i++ {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			// Units by prefix: the benchmark names them ns/op or ns/lookup.
			switch unit := f[i+1]; {
			case strings.HasPrefix(unit, "index-ns/"):
				r.indexNs = v
			case strings.HasPrefix(unit, "scan-ns/"):
				r.scanNs = v
			case unit == "scan/index-ratio":
				r.ratio = v
			}
		}
	}
	if r.ratio == 0 {
		r.err = fmt.Errorf("%s printed no scan/index-ratio:\n%s", r.command, out)
	}
	return r
}

func goBinary() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}
