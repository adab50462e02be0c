package main

import (
	"math"
	"strconv"
	"strings"
)

// formatValue writes v in the panel's unit, as Grafana's unit names mean
// them: "s" scales to ms and µs, "bytes" to binary KiB/MiB/GiB, "short" to
// K, Mil, Bil, "percentunit" is a ratio shown in percent. An unknown unit
// is shown like "short".
func formatValue(v float64, unit string) string {
	switch unit {
	case "s":
		return formatSeconds(v)
	case "bytes":
		return scaled(v, 1024, []string{" B", " KiB", " MiB", " GiB", " TiB"})
	case "percentunit":
		return trimNumber(v*100, 3) + "%"
	case "percent":
		return trimNumber(v, 3) + "%"
	case "ops":
		return scaled(v, 1000, []string{"", "K", "Mil", "Bil"}) + " ops/s"
	case "reqps":
		return scaled(v, 1000, []string{"", "K", "Mil", "Bil"}) + " req/s"
	default:
		return scaled(v, 1000, []string{"", "K", "Mil", "Bil", "Tri"})
	}
}

func formatSeconds(v float64) string {
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0 s"
	case a < 1e-3:
		return trimNumber(v*1e6, 3) + " µs"
	case a < 1:
		return trimNumber(v*1e3, 3) + " ms"
	case a < 60:
		return trimNumber(v, 3) + " s"
	case a < 3600:
		return trimNumber(v/60, 3) + " min"
	default:
		return trimNumber(v/3600, 3) + " h"
	}
}

// scaled divides v by base until it is below base, and appends the
// matching suffix.
func scaled(v, base float64, suffixes []string) string {
	i := 0
	for math.Abs(v) >= base && i < len(suffixes)-1 {
		v /= base
		i++
	}
	return trimNumber(v, 3) + suffixes[i]
}

// trimNumber rounds v to sig significant digits (at least the integer
// part) and drops trailing zeros: 0.0123, 12.3, 1234.
func trimNumber(v float64, sig int) string {
	if v == 0 {
		return "0"
	}
	digits := sig - 1 - int(math.Floor(math.Log10(math.Abs(v))))
	digits = max(digits, 0)
	s := strconv.FormatFloat(v, 'f', digits, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	if s == "-0" {
		s = "0"
	}
	return s
}

// niceTicks picks about n axis ticks covering [lo, hi] at a step of 1, 2
// or 5 times a power of ten, and returns the widened range they span.
func niceTicks(lo, hi float64, n int) (ticks []float64, newLo, newHi float64) {
	if hi <= lo {
		hi = lo + 1
	}
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	newLo = math.Floor(lo/step) * step
	newHi = math.Ceil(hi/step) * step
	for t := newLo; t <= newHi+step/2; t += step {
		// Adding the step repeatedly accumulates error: round each tick.
		ticks = append(ticks, math.Round(t/step)*step)
	}
	return ticks, newLo, newHi
}
