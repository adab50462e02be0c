package testutil

import (
	"reflect"
	"strings"
	"testing"
)

const exposition = `# HELP a_total A counter.
# TYPE a_total counter
a_total{queue="x"} 3
# HELP d_seconds A histogram.
# TYPE d_seconds histogram
d_seconds_bucket{le="0.1"} 1
d_seconds_bucket{le="+Inf"} 2
d_seconds_sum 0.3
d_seconds_count 2
# HELP g A gauge.
# TYPE g gauge
g 1
`

func TestSeriesTypes(t *testing.T) {
	want := map[string]string{"a_total": "counter", "d_seconds_bucket": "histogram",
		"d_seconds_sum": "histogram", "d_seconds_count": "histogram", "g": "gauge"}
	if got := PromText(exposition).SeriesTypes(); !reflect.DeepEqual(got, want) {
		t.Errorf("SeriesTypes() = %v, want %v", got, want)
	}
}

func TestDashboardQueries(t *testing.T) {
	dashboard := `{
	  "templating": {"list": [
	    {"name": "datasource", "type": "datasource", "query": "prometheus"},
	    {"name": "job", "type": "query", "query": {"query": "label_values(g{x=\"a,b\"}, job)", "refId": "A"}},
	    {"name": "old", "type": "query", "query": "label_values(a_total, queue)"}
	  ]},
	  "panels": [
	    {"title": "P", "targets": [{"refId": "A", "expr": "g"}, {"refId": "B", "expr": "rate(a_total[5m])"}]},
	    {"type": "row", "title": "R", "collapsed": true, "panels": [{"title": "Q", "targets": [{"refId": "A", "expr": "g2"}]}]}
	  ]
	}`
	got, err := DashboardQueries([]byte(dashboard))
	if err != nil {
		t.Fatal(err)
	}
	want := []DashboardQuery{
		{`panel "P" A`, "g", false}, {`panel "P" B`, "rate(a_total[5m])", false}, {`panel "Q" A`, "g2", false},
		{"variable job", `g{x="a,b"}`, true}, {"variable old", "a_total", true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DashboardQueries() = %+v, want %+v", got, want)
	}

	for _, bad := range []string{
		`{"panels": [{"title": "P", "targets": [{"refId": "A", "query": "g"}]}]}`,
		`{"templating": {"list": [{"name": "v", "type": "query", "query": "metrics(g.*)"}]}}`,
	} {
		if _, err := DashboardQueries([]byte(bad)); err == nil {
			t.Errorf("DashboardQueries(%s): no error", bad)
		}
	}
}

func TestDashboardProblems(t *testing.T) {
	ok := []string{
		`g`, `rate(a_total[5m])`, `sum by (queue) (increase(a_total[1h]))`,
		`histogram_quantile(0.9, sum by (le) (rate(d_seconds_bucket[5m])))`,
		`rate(d_seconds_sum[5m]) / rate(d_seconds_count[5m])`, `deriv(g[5m])`,
	}
	for _, expr := range ok {
		if p := DashboardProblems([]DashboardQuery{{Where: "q", Expr: expr}}, exposition); len(p) > 0 {
			t.Errorf("%s: %v, want none", expr, p)
		}
	}
	for expr, want := range map[string]string{
		`gg`:                                 "gg is not served",
		`rate(a_totl[5m])`:                   "a_totl is not served",
		`histogram_quantile(0.9, d_seconds)`: "a histogram, select its d_seconds_bucket",
		`a_total`:                            "outside rate()",
		`d_seconds_count`:                    "outside rate()",
		`histogram_quantile(0.9, d_seconds_bucket)`: "outside histogram_quantile",
		`sum by (le) (rate(d_seconds_bucket[5m]))`:  "outside histogram_quantile",
		`rate(g[5m])`: "a gauge, inside rate()",
		`vector(1)`:   "selects no metric",
		`rte(g[5m])`:  "unknown function",
		`g + on (x) group_left (a_total) rate(gg[5m])`:    "gg is not served",
		`label_replace(g, "a_total", "$1", "gg", "(.*)")`: "",
	} {
		p := DashboardProblems([]DashboardQuery{{Where: "q", Expr: expr}}, exposition)
		if want == "" && len(p) > 0 || want != "" && (len(p) != 1 || !strings.Contains(p[0], want)) {
			t.Errorf("%s: problems %q, want one about %q", expr, p, want)
		}
	}

	// label_values() reads labels alone: any type will do, but not a
	// metric that is not served.
	labels := []DashboardQuery{{Where: "v", Expr: "a_total", LabelsOnly: true}, {Where: "w", Expr: "a_totl", LabelsOnly: true}}
	if p := DashboardProblems(labels, exposition); len(p) != 1 || !strings.Contains(p[0], "w: a_totl is not served") {
		t.Errorf("label_values() queries: problems %q, want one about a_totl", p)
	}
}
