package testutil

import (
	"reflect"
	"strings"
	"testing"
)

func TestPromQLMetrics(t *testing.T) {
	for _, tc := range []struct {
		expr string
		// want is each selector as name<within...>, e.g. "x_bucket<histogram_quantile,sum,rate>".
		want []string
	}{
		{`up`, []string{"up<>"}},
		{`histogram_quantile(0.99, sum by (le, queue) (rate(gamesession_controller_sync_duration_seconds_bucket{job="$job", queue=~"a|b"}[$__rate_interval])))`,
			[]string{"gamesession_controller_sync_duration_seconds_bucket<histogram_quantile,sum,rate>"}},
		// Label lists after by, without, on, ignoring, group_left hold no
		// metrics; an aggregation's by clause may follow its arguments.
		{`sum without (result) (rate(a_total{result=~"conflict|error"}[5m])) / on (instance) group_left (name) sum(b) by (le)`,
			[]string{"a_total<sum,rate>", "b<sum>"}},
		{`a * ignoring (x) group_right c`, []string{"a<>", "c<>"}},
		// Keywords are case-insensitive; grouping parentheses are no call.
		{`SUM BY (le) ((rate(foo[5m]))) AND bar OR baz UNLESS qux`, []string{"foo<sum,rate>", "bar<>", "baz<>", "qux<>"}},
		// Strings hold no metrics, whatever they look like.
		{`label_replace(up{job="a}b(c"}, "dst", "$1", "src", "(.*)") or count_values('le', x) or vector(0)`,
			[]string{"up<label_replace>", "x<count_values>"}},
		{"label_join(y, `d`, \",\", \"a\\\"b\")", []string{"y<label_join>"}},
		// A name given as a matcher, or quoted.
		{`{__name__="foo", job="x"} + {"bar.baz", job="y"}`, []string{"foo<>", "bar.baz<>"}},
		// Modifiers, durations, subqueries and numbers.
		{`rate(foo[5m] offset -1h30m) @ end() > bool 1e-3 * 0x1F - Inf + NaN`, []string{"foo<rate>"}},
		{`max_over_time(rate(foo[1m])[1h:5m]) > .5`, []string{"foo<max_over_time,rate>"}},
		// Recording rule names have colons; comments run to the line's end.
		{"job:foo:rate5m # not_a_metric{\n+ topk($n, bar) / ${scale}", []string{"job:foo:rate5m<>", "bar<topk>"}},
		{`histogram_quantile(0.5, x_bucket[${__rate_interval}])`, []string{"x_bucket<histogram_quantile>"}},
	} {
		refs, err := PromQLMetrics(tc.expr)
		if err != nil {
			t.Errorf("PromQLMetrics(%q): %v", tc.expr, err)
			continue
		}
		var got []string
		for _, r := range refs {
			got = append(got, r.Name+"<"+strings.Join(r.Within, ",")+">")
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("PromQLMetrics(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

func TestPromQLMetricsMatchers(t *testing.T) {
	refs, err := PromQLMetrics(`rate(x_total{job="$job", code!~"2..", a="q\"uo"}[5m])`)
	if err != nil {
		t.Fatal(err)
	}
	want := []LabelMatcher{{"job", "=", "$job"}, {"code", "!~", "2.."}, {"a", "=", `q"uo`}}
	if len(refs) != 1 || !reflect.DeepEqual(refs[0].Matchers, want) {
		t.Fatalf("refs %+v, want one with matchers %+v", refs, want)
	}
	if !refs[0].Has("job", "=", "$job") || refs[0].Has("job", "=~", "$job") {
		t.Errorf("Has: wrong answer for %+v", refs[0].Matchers)
	}
}

// Errors, rather than a wrong list: what the extractor cannot read must not
// pass for a query it checked.
func TestPromQLMetricsErrors(t *testing.T) {
	for _, tc := range []struct{ expr, wantErr string }{
		{`rte(foo[5m])`, "unknown function rte"},
		{`Rate(foo[5m])`, "unknown function Rate"}, // function names are case-sensitive
		{`sum(rate(foo[5m])`, "unclosed ("},
		{`foo)`, "unbalanced )"},
		{`foo{job="x}`, "unterminated string"},
		{`foo{job="x"`, "unclosed {"},
		{`foo{job=x}`, "not a string"},
		{`rate(foo[5m)`, "unexpected ')'"},
		{`{__name__=~"foo.*"}`, "cannot be known"},
		{`{job="x"}`, "without a metric name"},
		{`sum by le (foo)`, "without its label list"},
		{`foo | bar`, "unexpected '|'"},
	} {
		refs, err := PromQLMetrics(tc.expr)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("PromQLMetrics(%q) = %+v, %v; want an error about %q", tc.expr, refs, err, tc.wantErr)
		}
	}
}
