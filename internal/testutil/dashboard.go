package testutil

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// DashboardQuery is one PromQL query of a Grafana dashboard.
type DashboardQuery struct {
	// Where names it in messages: panel "title" refId, or variable name.
	Where string
	Expr  string
	// LabelsOnly marks a variable's label_values() query, which reads the
	// series' labels alone: a counter needs no rate() there.
	LabelsOnly bool
}

// grafanaPanel is what DashboardQueries reads of a panel; a row's panels,
// when it is collapsed, are nested in it.
type grafanaPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		RefID string  `json:"refId"`
		Expr  *string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"`
}

// DashboardQueries returns the PromQL of a Grafana dashboard's JSON: every
// panel target's expr, and the metric query of every label_values(metric,
// label) variable. A target without an expr is an error, so that a query
// in another field is not skipped unchecked; so is a query variable of
// another form.
func DashboardQueries(dashboard []byte) ([]DashboardQuery, error) {
	var d struct {
		Panels     []grafanaPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(dashboard, &d); err != nil {
		return nil, err
	}
	var queries []DashboardQuery
	var walk func([]grafanaPanel) error
	walk = func(panels []grafanaPanel) error {
		for _, p := range panels {
			for _, t := range p.Targets {
				where := fmt.Sprintf("panel %q %s", p.Title, t.RefID)
				if t.Expr == nil || strings.TrimSpace(*t.Expr) == "" {
					return fmt.Errorf("%s has no expr", where)
				}
				queries = append(queries, DashboardQuery{Where: where, Expr: *t.Expr})
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		// The query is a string, or an object with one (Grafana 10 and later).
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var obj struct{ Query string }
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				return nil, fmt.Errorf("variable %s: query %s", v.Name, v.Query)
			}
			q = obj.Query
		}
		args, ok := strings.CutPrefix(strings.TrimSpace(q), "label_values(")
		comma := strings.LastIndexByte(args, ',')
		if !ok || comma < 0 || !strings.HasSuffix(args, ")") {
			return nil, fmt.Errorf("variable %s: %q is no label_values(metric, label)", v.Name, q)
		}
		queries = append(queries, DashboardQuery{Where: "variable " + v.Name, Expr: args[:comma], LabelsOnly: true})
	}
	return queries, nil
}

// DashboardProblems checks queries against the metrics a controller
// serves (its /metrics): every metric a query selects must have samples
// there, and be used as its type wants. Counters, and a histogram's _sum,
// _count and _bucket series, only grow, so they are read through rate(),
// irate() or increase(), and _bucket series through histogram_quantile()
// or histogram_fraction() as well; a gauge is not a counter to take the
// rate of. It returns one line per problem.
func DashboardProblems(queries []DashboardQuery, served PromText) []string {
	types := served.SeriesTypes()
	var problems []string
	for _, q := range queries {
		refs, err := PromQLMetrics(q.Expr)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", q.Where, err))
			continue
		}
		if len(refs) == 0 {
			problems = append(problems, fmt.Sprintf("%s: selects no metric: %s", q.Where, q.Expr))
		}
		for _, r := range refs {
			if p := seriesProblem(r, types, !q.LabelsOnly); p != "" {
				problems = append(problems, fmt.Sprintf("%s: %s", q.Where, p))
			}
		}
	}
	return problems
}

// seriesProblem says what is wrong with the selector r, given the types of
// the served series; with typed false, only whether it is served.
func seriesProblem(r MetricRef, types map[string]string, typed bool) string {
	within := func(fns ...string) bool {
		return slices.ContainsFunc(r.Within, func(f string) bool { return slices.Contains(fns, f) })
	}
	counting := within("rate", "irate", "increase")
	var suffix string // of a histogram's or summary's series
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if strings.HasSuffix(r.Name, s) {
			suffix = s
		}
	}
	typ, ok := types[r.Name]
	switch {
	case !ok:
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			if t := types[r.Name+s]; t == "histogram" || t == "summary" {
				return fmt.Sprintf("%s is not served: a %s, select its %s_bucket, _sum or _count", r.Name, t, r.Name)
			}
		}
		return fmt.Sprintf("%s is not served", r.Name)
	case !typed:
	case typ == "histogram" && suffix == "_bucket":
		if !counting || !within("histogram_quantile", "histogram_fraction") {
			return fmt.Sprintf("%s outside histogram_quantile(…rate(…)) or histogram_fraction(…rate(…))", r.Name)
		}
	case typ == "counter" || (typ == "histogram" || typ == "summary") && suffix != "":
		if !counting {
			return fmt.Sprintf("%s (%s) outside rate(), irate() or increase()", r.Name, typ)
		}
	case typ == "gauge":
		if counting {
			return fmt.Sprintf("%s, a gauge, inside rate(), irate() or increase()", r.Name)
		}
	}
	return ""
}
