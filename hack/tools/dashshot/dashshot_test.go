package main

import (
	"testing"
	"time"
)

func TestFormatValue(t *testing.T) {
	for _, c := range []struct {
		v    float64
		unit string
		want string
	}{
		{0, "short", "0"},
		{42, "short", "42"},
		{1530, "short", "1.53K"},
		{0.25, "percentunit", "25%"},
		{0.0042, "s", "4.2 ms"},
		{0.00002, "s", "20 µs"},
		{90, "s", "1.5 min"},
		{75 * 1024 * 1024, "bytes", "75 MiB"},
		{3.456, "ops", "3.46 ops/s"},
		{12, "reqps", "12 req/s"},
	} {
		if got := formatValue(c.v, c.unit); got != c.want {
			t.Errorf("formatValue(%v, %q) = %q, want %q", c.v, c.unit, got, c.want)
		}
	}
}

func TestNiceTicks(t *testing.T) {
	ticks, lo, hi := niceTicks(0, 37, 4)
	if lo != 0 || hi != 40 || len(ticks) != 5 || ticks[1] != 10 {
		t.Errorf("niceTicks(0, 37, 4) = %v, %v, %v; want 0..40 by 10", ticks, lo, hi)
	}
}

func TestExpand(t *testing.T) {
	v := variables{Job: "j", Range: 9 * time.Minute, Interval: 2 * time.Second, RateInterval: rateInterval(2*time.Second, time.Second)}
	got := v.expand(`rate(x{job="$job"}[$__rate_interval]) + increase(y{job="${job}"}[$__range]) + z[$__interval]`)
	want := `rate(x{job="j"}[4s]) + increase(y{job="j"}[540s]) + z[2s]`
	if got != want {
		t.Errorf("expand:\n got %s\nwant %s", got, want)
	}
}

func TestLegendName(t *testing.T) {
	labels := map[string]string{"__name__": "m", "queue": "gamesessions", "result": "success"}
	if got := legendName("{{queue}} {{ result }}", labels); got != "gamesessions success" {
		t.Errorf("legendName = %q", got)
	}
	if got := legendName("", labels); got != `m{queue="gamesessions", result="success"}` {
		t.Errorf("legendName without a format = %q", got)
	}
}

func TestSegments(t *testing.T) {
	t0 := time.Unix(0, 0)
	pts := []point{{T: t0}, {T: t0.Add(2 * time.Second)}, {T: t0.Add(10 * time.Second)}}
	if got := segments(pts, 2*time.Second); len(got) != 2 || len(got[0]) != 2 {
		t.Errorf("segments = %v, want a break before the third point", got)
	}
}
