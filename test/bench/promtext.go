package main

import (
	"bufio"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sample is one line of the Prometheus text exposition format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// samples is a parsed scrape. A small parser, rather than prometheus/common's
// expfmt, keeps the benchmark from adding a direct dependency to go.mod for the
// one format it reads; it handles what the API server and client_golang emit
// (escaped label values, NaN and Inf, optional timestamps).
type samples []sample

func parseProm(text string) (samples, error) {
	var out samples
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parsePromLine(line)
		if err != nil {
			return nil, fmt.Errorf("%w in %q", err, line)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parsePromLine(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return s, fmt.Errorf("no value")
	}
	s.name, line = line[:i], line[i:]
	if line[0] == '{' {
		line = line[1:]
		for {
			line = strings.TrimLeft(line, ", ")
			if strings.HasPrefix(line, "}") {
				line = line[1:]
				break
			}
			eq := strings.IndexByte(line, '=')
			if eq < 0 || eq+1 >= len(line) || line[eq+1] != '"' {
				return s, fmt.Errorf("bad label")
			}
			key := line[:eq]
			var val strings.Builder
			j := eq + 2
			for ; j < len(line) && line[j] != '"'; j++ {
				if line[j] == '\\' && j+1 < len(line) {
					j++
					switch line[j] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(line[j])
					}
					continue
				}
				val.WriteByte(line[j])
			}
			if j >= len(line) {
				return s, fmt.Errorf("unterminated label value")
			}
			s.labels[key] = val.String()
			line = line[j+1:]
		}
	}
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return s, fmt.Errorf("no value")
	}
	switch fields[0] {
	case "+Inf":
		s.value = math.Inf(1)
	case "-Inf":
		s.value = math.Inf(-1)
	case "NaN":
		s.value = math.NaN()
	default:
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return s, err
		}
		s.value = v
	}
	return s, nil
}

// sum adds the values of the samples called name whose labels include all of
// match.
func (ss samples) sum(name string, match map[string]string) float64 {
	total := 0.0
	for _, s := range ss {
		if s.name == name && hasLabels(s.labels, match) {
			total += s.value
		}
	}
	return total
}

// by sums the samples called name that match, grouped by the values of keys.
func (ss samples) by(name string, match map[string]string, keys ...string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range ss {
		if s.name != name || !hasLabels(s.labels, match) {
			continue
		}
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = s.labels[k]
		}
		out[strings.Join(parts, " ")] += s.value
	}
	return out
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// delta returns after minus before, per key, dropping keys that did not move.
func delta(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	for k, v := range before {
		if _, ok := after[k]; !ok && v != 0 {
			out[k] = -v
		}
	}
	return out
}
