package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

// dashboard is the part of Grafana's dashboard JSON model that the picture
// needs. Everything else in the file (links, tooltips, refresh, the data
// source variable) changes nothing on a still image and is ignored.
type dashboard struct {
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Type        string      `json:"type"`
	Title       string      `json:"title"`
	GridPos     gridPos     `json:"gridPos"`
	FieldConfig fieldConfig `json:"fieldConfig"`
	Options     options     `json:"options"`
	Targets     []target    `json:"targets"`
	// Panels holds the panels of a collapsed row; an expanded row has none
	// and its panels follow it at the top level.
	Panels []panel `json:"panels"`
}

// gridPos places a panel on Grafana's grid: 24 columns, rows of one unit
// each, y growing downwards.
type gridPos struct {
	H, W, X, Y int
}

type fieldConfig struct {
	Defaults  fieldDefaults `json:"defaults"`
	Overrides []override    `json:"overrides"`
}

type fieldDefaults struct {
	Unit       string     `json:"unit"`
	Min        *float64   `json:"min"`
	Max        *float64   `json:"max"`
	Custom     custom     `json:"custom"`
	Thresholds thresholds `json:"thresholds"`
	Mappings   []mapping  `json:"mappings"`
}

type custom struct {
	DrawStyle string    `json:"drawStyle"`
	PointSize float64   `json:"pointSize"`
	LineStyle lineStyle `json:"lineStyle"`
}

type lineStyle struct {
	Fill string    `json:"fill"`
	Dash []float64 `json:"dash"`
}

type thresholds struct {
	Steps []thresholdStep `json:"steps"`
}

// thresholdStep colours values from Value up to the next step; the first
// step's Value is null in the JSON and stands for minus infinity.
type thresholdStep struct {
	Color string   `json:"color"`
	Value *float64 `json:"value"`
}

// mapping is a value mapping of type "value": exact values shown as text in
// a colour (the state timeline's "leader" and "standby").
type mapping struct {
	Type    string                  `json:"type"`
	Options map[string]mappedResult `json:"options"`
}

type mappedResult struct {
	Text  string `json:"text"`
	Color string `json:"color"`
}

type override struct {
	Matcher struct {
		ID      string `json:"id"`
		Options string `json:"options"`
	} `json:"matcher"`
	Properties []struct {
		ID    string          `json:"id"`
		Value json.RawMessage `json:"value"`
	} `json:"properties"`
}

type options struct {
	TextMode string `json:"textMode"`
	Legend   *struct {
		ShowLegend bool `json:"showLegend"`
	} `json:"legend"`
}

type target struct {
	RefID        string `json:"refId"`
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
}

func readDashboard(path string) (*dashboard, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// Flatten collapsed rows so that every panel is drawn where its gridPos
	// says, as if the row were expanded.
	var flat []panel
	for _, p := range d.Panels {
		inner := p.Panels
		p.Panels = nil
		flat = append(flat, p)
		flat = append(flat, inner...)
	}
	sort.SliceStable(flat, func(i, j int) bool {
		a, b := flat[i].GridPos, flat[j].GridPos
		return a.Y < b.Y || a.Y == b.Y && a.X < b.X
	})
	d.Panels = flat
	return &d, nil
}

// variables holds what Grafana would substitute into a query.
type variables struct {
	Job          string
	Range        time.Duration // the dashboard's time range: $__range
	Interval     time.Duration // the query step: $__interval
	RateInterval time.Duration // $__rate_interval
}

// rateInterval is Grafana's $__rate_interval: the larger of the step plus
// one scrape interval and four scrape intervals, so that a rate() always
// has at least two samples whatever the step.
func rateInterval(step, scrape time.Duration) time.Duration {
	return max(step+scrape, 4*scrape)
}

// promDuration writes d as Prometheus reads it, in whole seconds (or
// milliseconds below one): 1h30m0s would not parse.
func promDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", int64(d/time.Second))
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// expand substitutes the dashboard variables in a query. Longer names go
// first: $__range must not be read as $__rate_interval's prefix, and
// neither as a user variable.
func (v variables) expand(expr string) string {
	r := strings.NewReplacer(
		"${__rate_interval}", promDuration(v.RateInterval),
		"$__rate_interval", promDuration(v.RateInterval),
		"${__interval}", promDuration(v.Interval),
		"$__interval", promDuration(v.Interval),
		"${__range}", promDuration(v.Range),
		"$__range", promDuration(v.Range),
		"${job}", v.Job,
		"$job", v.Job,
	)
	return r.Replace(expr)
}

var legendLabel = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// legendName is Grafana's display name of a series: the legend format with
// {{label}} replaced by the series' label (empty when it lacks it), or,
// without a format, the series' labels as Prometheus prints them.
func legendName(format string, labels map[string]string) string {
	if format != "" && format != "__auto" {
		return strings.TrimSpace(legendLabel.ReplaceAllStringFunc(format, func(m string) string {
			return labels[legendLabel.FindStringSubmatch(m)[1]]
		}))
	}
	name := labels["__name__"]
	var keys []string
	for k := range labels {
		if k != "__name__" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%q", k, labels[k]))
	}
	if len(parts) == 0 {
		if name == "" {
			return "value"
		}
		return name
	}
	return name + "{" + strings.Join(parts, ", ") + "}"
}
