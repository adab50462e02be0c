package testutil

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// PromText is a Prometheus text exposition.
type PromText string

// Sum adds up the samples of the metric (exact name, e.g.
// "workqueue_adds_total" or "..._count") whose labels include every pair in
// labels, and reports whether there was any.
func (m PromText) Sum(name string, labels map[string]string) (float64, bool) {
	total, found := 0.0, false
	for _, line := range strings.Split(string(m), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		series, value, ok := cutLast(line, " ")
		if !ok {
			continue
		}
		metric, labelText, _ := strings.Cut(series, "{")
		if metric != name || !hasLabels(strings.TrimSuffix(labelText, "}"), labels) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		total += v
		found = true
	}
	return total, found
}

// Series formats a metric and labels as Prometheus writes them, for messages.
func Series(name string, labels map[string]string) string {
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		pairs = append(pairs, fmt.Sprintf("%s=%q", k, labels[k]))
	}
	if len(pairs) == 0 {
		return name
	}
	return name + "{" + strings.Join(pairs, ",") + "}"
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// hasLabels reports whether the label text (`a="x",b="y"`) has every pair.
// Values here never contain quotes or commas, which keeps this simple.
func hasLabels(text string, want map[string]string) bool {
	have := map[string]string{}
	for _, pair := range strings.Split(text, ",") {
		if k, v, ok := strings.Cut(pair, "="); ok {
			have[k] = strings.Trim(v, `"`)
		}
	}
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// SeriesTypes returns the metric names the exposition has samples of, each
// with its family's type ("counter", "gauge", "histogram", "summary",
// "untyped"): a histogram's samples are named _bucket, _sum and _count, so
// those are the names a query can select, never the family's own.
func (m PromText) SeriesTypes() map[string]string {
	lines := strings.Split(string(m), "\n")
	families := map[string]string{}
	for _, line := range lines {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			families[f[2]] = f[3]
		}
	}
	types := map[string]string{}
	for _, line := range lines {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line[:strings.IndexAny(line+" ", "{ ")]
		typ, ok := families[name]
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, cut := strings.CutSuffix(name, suffix); !ok && cut {
				if t := families[base]; t == "histogram" || t == "summary" && suffix != "_bucket" {
					typ, ok = t, true
				}
			}
		}
		if !ok {
			typ = "untyped"
		}
		types[name] = typ
	}
	return types
}
