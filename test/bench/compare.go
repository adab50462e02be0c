package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// abSeries compares two controller binaries on the same fan-out, in the same
// run: each round starts each binary fresh (never both at once: they would
// fight over the same sessions), fans out once, stops it, and runs the
// update ceiling, in rotating order so that drift hits all three alike.
type abSeries struct {
	size                  int
	ctl, other            []fanRound
	ceil                  []time.Duration
	ctlRatio, otherRatio  []float64 // rolled / ceiling, per round
	otherName, compareBin string
}

func (e *env) compareSeries(ctx context.Context) ([]*abSeries, error) {
	var out []*abSeries
	delayArg := "--profile-change-delay=0"
	for _, h := range e.hot {
		s := &abSeries{size: h.size, compareBin: e.cfg.compareBin}
		timeout := 2*time.Minute + time.Duration(h.size)*40*time.Millisecond
		for round := range e.cfg.rounds {
			var ctl, other fanRound
			var ceil ceilingRound
			for k := range 3 {
				var err error
				switch (round + k) % 3 {
				case 0:
					ceil, err = e.ceiling(ctx, h.size, ceilingPut)
				case 1:
					ctl, err = e.fanOutFresh(ctx, e.controllerBin, nil, "ab-this", h, timeout, delayArg)
				case 2:
					other, err = e.fanOutFresh(ctx, e.cfg.compareBin, e.cfg.compareEnv, "ab-other", h, timeout, delayArg)
				}
				if err != nil {
					return out, err
				}
			}
			s.ctl, s.other, s.ceil = append(s.ctl, ctl), append(s.other, other), append(s.ceil, ceil.rolled)
			s.ctlRatio = append(s.ctlRatio, ctl.rolled.Seconds()/ceil.rolled.Seconds())
			s.otherRatio = append(s.otherRatio, other.rolled.Seconds()/ceil.rolled.Seconds())
			logf("A/B %d, round %d: this %s, other %s, ceiling %s", h.size, round+1,
				ctl.rolled.Round(time.Millisecond), other.rolled.Round(time.Millisecond), ceil.rolled.Round(time.Millisecond))
		}
		out = append(out, s)
	}
	return out, nil
}

// fanOutFresh starts bin, lets it settle, measures one fan-out and stops it.
func (e *env) fanOutFresh(ctx context.Context, bin string, environ []string, name string, h *hotProfile, timeout time.Duration, args ...string) (fanRound, error) {
	savedBin, savedEnv := e.controllerBin, e.controllerEnv
	e.controllerBin, e.controllerEnv = bin, environ
	p, _, err := e.coldStart(ctx, name, args...)
	e.controllerBin, e.controllerEnv = savedBin, savedEnv
	if err != nil {
		if p != nil {
			_ = e.stopController(p)
		}
		return fanRound{}, err
	}
	r, err := e.fanOut(ctx, p, h, timeout)
	if stopErr := e.stopController(p); err == nil {
		err = stopErr
	}
	return r, err
}

func (r *results) writeCompare(w func(string, ...any)) {
	if len(r.compare) == 0 {
		return
	}
	w("\n### A/B: this checkout against `%s`\n\n", r.compare[0].compareBin)
	if len(r.cfg.compareEnv) > 0 || len(r.cfg.apiServerFlags) > 0 {
		w("The other binary ran with the environment `%s`; kube-apiserver with the flags `%s`.\n\n",
			strings.Join(r.cfg.compareEnv, " "), strings.Join(r.cfg.apiServerFlags, " "))
	}
	w("Fan-out with `--profile-change-delay=0`, each controller a fresh process per round, paired with an update-ceiling round.\n\n")
	w("| Sessions | This: rolled / idle | Other: rolled / idle | Ceiling | This / ceiling | Other / ceiling | This / other | Controller CPU / kube-apiserver's, this / other | Syncs per session, this / other |\n|---:|---|---|---:|---:|---:|---:|---|---|\n")
	for _, s := range r.compare {
		var c, o, cd, od, b []float64
		for i := range s.ctl {
			c, o = append(c, s.ctl[i].rolled.Seconds()), append(o, s.other[i].rolled.Seconds())
			cd, od = append(cd, s.ctl[i].drained.Seconds()), append(od, s.other[i].drained.Seconds())
			b = append(b, s.ceil[i].Seconds())
		}
		_, cm, _ := spread(c)
		_, om, _ := spread(o)
		_, cdm, _ := spread(cd)
		_, odm, _ := spread(od)
		_, bm, _ := spread(b)
		_, cr, _ := spread(s.ctlRatio)
		_, or, _ := spread(s.otherRatio)
		var pair []float64
		for i := range c {
			pair = append(pair, c[i]/o[i])
		}
		lo, pm, hi := spread(pair)
		_, thisShare, _ := spread(cpuShares(s.ctl))
		_, otherShare, _ := spread(cpuShares(s.other))
		w("| %s | %s / %s | %s / %s | %s | %.2fx | %.2fx | **%.2fx** (%.2f–%.2f) | %.1f%% / %.1f%% | %.2f / %.2f |\n", num(s.size),
			secs(dur(cm)), secs(dur(cdm)), secs(dur(om)), secs(dur(odm)), secs(dur(bm)), cr, or, pm, lo, hi,
			100*thisShare, 100*otherShare, syncsPerSession(s.ctl, s.size), syncsPerSession(s.other, s.size))
	}
	w("\n%s\n", fmt.Sprintf("Rounds: %d per size. Each round, as in the fan-out rounds above:", r.cfg.rounds))
	w("\n| Sessions | Round | Binary | Rolled | Per session | Written | Queue |\n|---:|---:|---|---:|---|---|---|\n")
	for _, s := range r.compare {
		for i := range s.ctl {
			for _, b := range []struct {
				name string
				f    fanRound
			}{{"this", s.ctl[i]}, {"other", s.other[i]}} {
				f := b.f
				w("| %s | %d | %s | %s | %s / %s / %s | %s / %s / %s | %g waits, %g failed, %d reopened |\n", num(s.size), i+1, b.name, secs(f.rolled),
					secs(f.perSession.median), secs(f.perSession.p99), secs(f.perSession.max),
					secs(f.written.median), secs(f.written.p99), secs(f.written.max), f.longWaits, f.failed, f.reopened)
			}
		}
	}
}

// cpuShares is, per round, the controller's CPU time as a share of the
// kube-apiserver's in the same window.
func cpuShares(rounds []fanRound) []float64 {
	var out []float64
	for _, r := range rounds {
		if api := r.req.cpu["kube-apiserver"]; api > 0 {
			out = append(out, r.req.cpu["controller"]/api)
		}
	}
	return out
}

// syncsPerSession is the median of the rounds' syncs over the fan-out size.
func syncsPerSession(rounds []fanRound, size int) float64 {
	var per []float64
	for _, r := range rounds {
		per = append(per, r.syncs/float64(size))
	}
	_, med, _ := spread(per)
	return med
}
