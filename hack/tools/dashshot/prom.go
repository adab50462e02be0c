package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// series is one time series of a query's result, with the points Prometheus
// returned. Missing steps are simply absent, as in the API; NaN and
// infinite values (histogram_quantile of no observations) are dropped, so
// that both show as gaps.
type series struct {
	Labels map[string]string
	Points []point
}

type point struct {
	T time.Time
	V float64
}

// promClient queries the Prometheus HTTP API. It never uses a proxy: the
// server is the local one the picture script started.
type promClient struct {
	base string
	http *http.Client
}

func newPromClient(base string) *promClient {
	return &promClient{base: base, http: &http.Client{
		Transport: &http.Transport{Proxy: nil},
		Timeout:   30 * time.Second,
	}}
}

// queryRange runs one /api/v1/query_range, as a Grafana time series panel
// does for each of its targets.
func (c *promClient) queryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]series, error) {
	q := url.Values{}
	q.Set("query", expr)
	q.Set("start", strconv.FormatInt(start.Unix(), 10))
	q.Set("end", strconv.FormatInt(end.Unix(), 10))
	q.Set("step", strconv.FormatFloat(step.Seconds(), 'f', -1, 64))
	// A form body, not the URL: the longest queries of the dashboard are
	// near a kilobyte once escaped.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/api/v1/query_range", strings.NewReader(q.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, body)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s", r.Error)
	}
	if r.Data.ResultType != "matrix" {
		return nil, fmt.Errorf("result type %q, want matrix", r.Data.ResultType)
	}
	var out []series
	for _, res := range r.Data.Result {
		s := series{Labels: res.Metric}
		for _, v := range res.Values {
			ts, ok1 := v[0].(float64)
			str, ok2 := v[1].(string)
			if !ok1 || !ok2 {
				continue
			}
			f, err := strconv.ParseFloat(str, 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				continue
			}
			s.Points = append(s.Points, point{T: time.UnixMilli(int64(ts * 1000)), V: f})
		}
		if len(s.Points) > 0 {
			out = append(out, s)
		}
	}
	return out, nil
}
