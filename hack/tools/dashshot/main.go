// Command dashshot draws a Grafana dashboard as one SVG picture from a
// Prometheus server: for each panel of the dashboard's JSON it runs the
// panel's own queries through /api/v1/query_range over a time window, and
// draws rows, panel titles, time series with their legends, stat panels as
// numbers and state timelines as coloured lanes, on Grafana's grid.
//
// It exists so that docs/operations.md can show the dashboard of a real run
// without Grafana (hack/dashboard-picture.sh runs it). It reads only what a
// still picture needs of the dashboard model: panel types row, stat,
// state-timeline and timeseries; gridPos; units; min and max; thresholds,
// value mappings and the overrides by name or regexp that set a colour or a
// dashed line. Variables: $job (the -job flag), $__range, $__interval and
// $__rate_interval as Grafana computes them.
//
//	go run . -dashboard ../../../charts/gamesession-controller/files/grafana-dashboard.json \
//	  -prometheus http://127.0.0.1:9090 -start 2026-01-02T10:00:00Z -end 2026-01-02T10:10:00Z -out dash.svg
//
// It prints, per panel, how many series its queries returned, so that a run
// that left a panel empty says so, and fails if any query fails.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"
)

func main() {
	var (
		dashPath = flag.String("dashboard", "charts/gamesession-controller/files/grafana-dashboard.json", "The Grafana dashboard JSON.")
		promURL  = flag.String("prometheus", "http://127.0.0.1:9090", "Base URL of the Prometheus server.")
		job      = flag.String("job", "gamesession-controller-metrics", "The value of the dashboard's $job variable.")
		startStr = flag.String("start", "", "Start of the window: RFC 3339 or Unix seconds. Default: -duration before -end.")
		endStr   = flag.String("end", "", "End of the window: RFC 3339 or Unix seconds. Default: now.")
		duration = flag.Duration("duration", 15*time.Minute, "Length of the window when -start is not set.")
		scrape   = flag.Duration("scrape-interval", 15*time.Second, "Prometheus' scrape interval, for $__rate_interval.")
		points   = flag.Int("points", 300, "About how many points per series: the query step is the window divided by this, in whole seconds.")
		width    = flag.Float64("width", 1600, "Width of the picture in pixels.")
		subtitle = flag.String("subtitle", "", "A line under the title saying what the picture shows.")
		out      = flag.String("out", "dashboard.svg", "The SVG file to write.")
	)
	flag.Parse()
	if err := run(*dashPath, *promURL, *job, *startStr, *endStr, *duration, *scrape, *points, *width, *subtitle, *out); err != nil {
		fmt.Fprintf(os.Stderr, "dashshot: %v\n", err)
		os.Exit(1)
	}
}

func run(dashPath, promURL, job, startStr, endStr string, duration, scrape time.Duration, points int, width float64, subtitle, out string) error {
	d, err := readDashboard(dashPath)
	if err != nil {
		return err
	}
	end := time.Now()
	if endStr != "" {
		if end, err = parseTime(endStr); err != nil {
			return fmt.Errorf("-end: %w", err)
		}
	}
	start := end.Add(-duration)
	if startStr != "" {
		if start, err = parseTime(startStr); err != nil {
			return fmt.Errorf("-start: %w", err)
		}
	}
	if !end.After(start) {
		return fmt.Errorf("the window %s to %s is empty", start, end)
	}
	// The step Grafana would pick for a panel about `points` pixels wide,
	// in whole seconds, and never below the scrape interval: finer steps
	// only repeat samples.
	step := max(end.Sub(start)/time.Duration(max(points, 1)), scrape).Round(time.Second)
	step = max(step, time.Second)
	vars := variables{Job: job, Range: end.Sub(start).Round(time.Second), Interval: step, RateInterval: rateInterval(step, scrape)}

	client := newPromClient(promURL)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pic := &picture{Dashboard: d, Data: make([]panelData, len(d.Panels)), Start: start, End: end, Step: step, Width: width, Subtitle: subtitle}
	failed := 0
	for i, pn := range d.Panels {
		if pn.Type == "row" {
			continue
		}
		var data panelData
		for _, t := range pn.Targets {
			expr := vars.expand(t.Expr)
			ss, err := client.queryRange(ctx, expr, start, end, step)
			if err != nil {
				data.Errors = append(data.Errors, fmt.Sprintf("%s: %v", t.RefID, err))
				fmt.Fprintf(os.Stderr, "dashshot: panel %q, query %s: %v\n  %s\n", pn.Title, t.RefID, err, expr)
				failed++
				continue
			}
			for _, s := range ss {
				data.Series = append(data.Series, drawnSeries{Name: legendName(t.LegendFormat, s.Labels), Points: s.Points})
			}
		}
		styleSeries(pn, data.Series)
		pic.Data[i] = data
		status := fmt.Sprintf("%d series", len(data.Series))
		if len(data.Series) == 0 && len(data.Errors) == 0 {
			status = "EMPTY"
		}
		fmt.Printf("%-32s %-15s %s\n", pn.Title, pn.Type, status)
	}
	if err := os.WriteFile(out, []byte(pic.svg()), 0o644); err != nil {
		return err
	}
	fmt.Printf("dashshot: wrote %s (%s to %s, step %s, $__rate_interval %s)\n", out,
		start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339), step, promDuration(vars.RateInterval))
	if failed > 0 {
		return fmt.Errorf("%d queries failed", failed)
	}
	return nil
}

func parseTime(s string) (time.Time, error) {
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		return time.UnixMilli(int64(secs * 1000)), nil
	}
	return time.Parse(time.RFC3339, s)
}
