package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"
)

// apiSnapshot is the API server's view at one moment: requests served, by
// verb and resource, read from its own apiserver_request_total; requests APF
// dispatched per flow schema; watches open; and CPU used so far by each
// process that shares the machine.
type apiSnapshot struct {
	at       time.Time
	requests map[string]float64 // "VERB resource code"
	flows    map[string]float64 // flow schema -> dispatched requests
	watches  map[string]float64 // resource -> open WATCH requests
	// watchLists counts the informers' initial syncs: with client-go's
	// WatchListClient (on by default since 1.35) an informer streams its
	// initial state over a WATCH instead of LISTing, and the LIST count alone
	// would show nothing.
	watchLists map[string]float64
	cpu        map[string]float64 // process -> CPU seconds
	busy, all  float64            // machine CPU ticks, busy and in all
}

// cpuPIDs lists the processes whose CPU time snapshots record.
func (e *env) cpuPIDs(ctl *ctlProc) map[string]int {
	pids := map[string]int{"benchmark": os.Getpid()}
	for k, v := range e.pids {
		pids[k] = v
	}
	if ctl != nil {
		pids["controller"] = ctl.pid()
	}
	return pids
}

func (e *env) snapshot(ctx context.Context, ctl *ctlProc) (apiSnapshot, error) {
	s := apiSnapshot{at: time.Now(), cpu: map[string]float64{}}
	s.busy, s.all = machineCPU()
	for name, pid := range e.cpuPIDs(ctl) {
		s.cpu[name] = cpuSeconds(pid)
	}
	text, err := e.cp.APIServerMetrics(ctx)
	if err != nil {
		return s, err
	}
	ss, err := parseProm(text)
	if err != nil {
		return s, err
	}
	s.requests = map[string]float64{}
	for _, x := range ss {
		if x.name != "apiserver_request_total" || x.labels["resource"] == "" {
			continue // non-resource requests: /metrics, /readyz, discovery
		}
		s.requests[x.labels["verb"]+" "+resourceName(x.labels)+" "+x.labels["code"]] += x.value
	}
	s.flows = ss.by("apiserver_flowcontrol_dispatched_requests_total", nil, "flow_schema")
	s.watchLists = map[string]float64{}
	for _, x := range ss {
		if x.name == "apiserver_watch_list_duration_seconds_count" {
			s.watchLists[resourceName(x.labels)] += x.value
		}
	}
	s.watches = map[string]float64{}
	for _, x := range ss {
		if x.name == "apiserver_longrunning_requests" && x.labels["verb"] == "WATCH" {
			s.watches[resourceName(x.labels)] += x.value
		}
	}
	return s, nil
}

func resourceName(l map[string]string) string {
	r := l["resource"]
	if l["subresource"] != "" {
		r += "/" + l["subresource"]
	}
	if l["group"] != "" {
		r += "." + l["group"]
	}
	return r
}

// requestDelta is what the API server served between two snapshots.
type requestDelta struct {
	byVerbResource map[string]float64 // "VERB resource"
	failed         map[string]float64 // "VERB resource code", for codes >= 400
	flows          map[string]float64
	watchLists     map[string]float64
	cpu            map[string]float64 // CPU seconds in the window
	machineBusy    float64            // share of the machine's CPU time that was busy
	wall           time.Duration
}

func diffSnapshots(before, after apiSnapshot) requestDelta {
	d := requestDelta{byVerbResource: map[string]float64{}, failed: map[string]float64{}, cpu: map[string]float64{}, wall: after.at.Sub(before.at)}
	for k, v := range delta(before.requests, after.requests) {
		f := strings.Fields(k)
		d.byVerbResource[f[0]+" "+f[1]] += v
		if f[2] >= "400" {
			d.failed[k] += v
		}
	}
	d.flows = delta(before.flows, after.flows)
	d.watchLists = delta(before.watchLists, after.watchLists)
	for k, v := range after.cpu {
		d.cpu[k] = v - before.cpu[k]
	}
	if all := after.all - before.all; all > 0 {
		d.machineBusy = (after.busy - before.busy) / all
	}
	return d
}

// count is the number of requests of verb on resource (e.g. "PUT",
// "deployments.apps").
func (d requestDelta) count(verb, resource string) float64 {
	return d.byVerbResource[verb+" "+resource]
}

// countOn counts requests of verb on any of resources.
func (d requestDelta) countOn(verb string, resources []string) float64 {
	n := 0.0
	for _, r := range resources {
		n += d.count(verb, r)
	}
	return n
}

// writesTo counts mutating requests on the given resources.
func (d requestDelta) writesTo(resources []string) float64 {
	n := 0.0
	for k, v := range d.byVerbResource {
		f := strings.Fields(k)
		switch f[0] {
		case "GET", "LIST", "WATCH":
			continue
		}
		if contains(resources, f[1]) {
			n += v
		}
	}
	return n
}

// lines renders the delta sorted by resource then verb.
func (d requestDelta) lines() []string {
	var out []string
	for k, v := range d.byVerbResource {
		out = append(out, fmt.Sprintf("%s %g", k, v))
	}
	sort.Slice(out, func(i, j int) bool {
		fi, fj := strings.Fields(out[i]), strings.Fields(out[j])
		if fi[1] != fj[1] {
			return fi[1] < fj[1]
		}
		return fi[0] < fj[0]
	})
	return out
}

func (d requestDelta) coresUsed() string {
	var parts []string
	for _, name := range []string{"kube-apiserver", "etcd", "controller", "benchmark"} {
		if v, ok := d.cpu[name]; ok && d.wall > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f", name, v/d.wall.Seconds()))
		}
	}
	// What the machine was busy with beyond these processes is other work
	// on the shared machine: the noise in this window.
	ours := 0.0
	for _, v := range d.cpu {
		ours += v
	}
	others := d.machineBusy*float64(runtime.NumCPU()) - ours/d.wall.Seconds()
	return strings.Join(parts, ", ") + fmt.Sprintf(", other processes %.2f (machine %.0f%% busy)", max(others, 0), d.machineBusy*100)
}

// deploymentWrites counts writes to Deployments, whichever verb the
// controller uses (update, merge patch, apply).
func (d requestDelta) deploymentWrites() float64 {
	return d.count("PUT", "deployments.apps") + d.count("PATCH", "deployments.apps") + d.count("APPLY", "deployments.apps")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
