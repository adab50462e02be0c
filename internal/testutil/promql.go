package testutil

import (
	"fmt"
	"slices"
	"strings"
)

// MetricRef is one metric selector of a PromQL expression.
type MetricRef struct {
	// Name is the metric name: the selector's identifier, or its
	// __name__="..." matcher.
	Name string
	// Within lists the functions and aggregations the selector is an
	// argument of, outermost first, e.g. [histogram_quantile sum rate].
	Within []string
	// Matchers are the selector's label matchers, as written; a value may
	// hold Grafana variables ("$job").
	Matchers []LabelMatcher
}

// LabelMatcher is one label matcher of a selector, e.g. job="$job".
type LabelMatcher struct {
	Name, Op, Value string
}

// Has reports whether the selector has the matcher name op value.
func (r MetricRef) Has(name, op, value string) bool {
	return slices.Contains(r.Matchers, LabelMatcher{name, op, value})
}

// PromQLMetrics returns the metric selectors of a PromQL expression, in the
// order they appear.
//
// It is not Prometheus' parser, which is not in this module and should not
// be for a test: it is a tokenizer that knows enough of the grammar to tell
// metric names from everything else, function and aggregation names,
// keywords (by, without, on, ignoring, group_left, group_right, bool, offset,
// and, or, unless, atan2, inf, nan), label names in grouping clauses and
// matchers, strings, numbers and durations, ranges and subqueries, comments
// and Grafana's variables ($job, ${job}, $__rate_interval). It checks little
// else: a malformed expression may pass, but an identifier followed by "("
// that is no PromQL function, unbalanced parentheses or braces, an
// unterminated string, a selector whose name it cannot know (__name__=~) and
// a character PromQL does not have are errors, so that nothing is silently
// taken for, or hidden from, a metric name.
func PromQLMetrics(expr string) ([]MetricRef, error) {
	l := &promLexer{s: expr}
	refs, err := l.run()
	if err != nil {
		return nil, fmt.Errorf("%w, in %q", err, expr)
	}
	return refs, nil
}

// promAggregations take a parenthesised argument list, optionally after or
// before a by/without clause. Keywords are case-insensitive in PromQL;
// function names are not.
var promAggregations = set("sum", "avg", "count", "min", "max", "group", "stddev", "stdvar",
	"topk", "bottomk", "quantile", "count_values", "limitk", "limit_ratio")

// promLabelLists are keywords followed by a parenthesised list of label
// names; for group_left and group_right the list is optional.
var promLabelLists = set("by", "without", "on", "ignoring", "group_left", "group_right")

// promKeywords are the other keywords: binary operators, modifiers and the
// special float values.
var promKeywords = set("and", "or", "unless", "atan2", "bool", "offset", "inf", "nan")

// promFunctions are PromQL's functions (Prometheus 3), and the @ modifier's
// start() and end().
var promFunctions = set(
	"abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
	"avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh",
	"count_over_time", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "deg",
	"delta", "deriv", "double_exponential_smoothing", "exp", "first_over_time", "floor",
	"histogram_avg", "histogram_count", "histogram_fraction", "histogram_quantile",
	"histogram_stddev", "histogram_stdvar", "histogram_sum", "holt_winters", "hour", "idelta",
	"increase", "info", "irate", "label_join", "label_replace", "last_over_time", "ln", "log10",
	"log2", "mad_over_time", "max_over_time", "min_over_time", "minute", "month", "pi",
	"predict_linear", "present_over_time", "quantile_over_time", "rad", "rate", "resets",
	"round", "scalar", "sgn", "sin", "sinh", "sort", "sort_by_label", "sort_by_label_desc",
	"sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time", "sum_over_time", "tan", "tanh",
	"time", "timestamp", "vector", "year",
	"start", "end")

func set(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}

type promLexer struct {
	s string
	i int
	// calls holds, per open parenthesis, the function or aggregation it
	// belongs to; "" for a parenthesised subexpression.
	calls []string
	// pending is the function or aggregation whose "(" comes next.
	pending string
	refs    []MetricRef
}

// run reads the whole expression, token by token.
func (l *promLexer) run() ([]MetricRef, error) {
	for {
		l.skipSpace()
		if l.i >= len(l.s) {
			break
		}
		c := l.s[l.i]
		var err error
		switch {
		case c == '"' || c == '\'' || c == '`':
			_, err = l.str()
		case c == '{':
			err = l.selector("")
		case c == '[':
			err = l.skipPast(']')
		case c == '(':
			l.i++
			l.calls = append(l.calls, l.pending)
			l.pending = ""
		case c == ')':
			l.i++
			if len(l.calls) == 0 {
				return nil, fmt.Errorf("unbalanced ) at %d", l.i-1)
			}
			l.calls = l.calls[:len(l.calls)-1]
		case c == '$':
			err = l.variable()
		case isDigit(c) || c == '.' && l.i+1 < len(l.s) && isDigit(l.s[l.i+1]):
			l.number()
		case isIdentStart(c):
			err = l.identifier()
		case strings.IndexByte("+-*/%^=!<>,@", c) >= 0:
			l.i++
		default:
			return nil, fmt.Errorf("unexpected %q at %d", c, l.i)
		}
		if err != nil {
			return nil, err
		}
	}
	if len(l.calls) > 0 {
		return nil, fmt.Errorf("%d unclosed (", len(l.calls))
	}
	if l.pending != "" {
		return nil, fmt.Errorf("%s without its (", l.pending)
	}
	return l.refs, nil
}

// skipSpace skips white space and # comments, which run to the line's end.
func (l *promLexer) skipSpace() {
	for l.i < len(l.s) {
		switch c := l.s[l.i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			l.i++
		case c == '#':
			for l.i < len(l.s) && l.s[l.i] != '\n' {
				l.i++
			}
		default:
			return
		}
	}
}

// peek returns the next character after white space, 0 at the end.
func (l *promLexer) peek() byte {
	l.skipSpace()
	if l.i < len(l.s) {
		return l.s[l.i]
	}
	return 0
}

// identifier reads a word: a keyword, a function or aggregation name, or
// else a metric name.
func (l *promLexer) identifier() error {
	start := l.i
	for l.i < len(l.s) && isIdentChar(l.s[l.i]) {
		l.i++
	}
	word := l.s[start:l.i]
	lower := strings.ToLower(word)
	switch {
	case promAggregations[lower]:
		l.pending = lower
	case promLabelLists[lower]:
		if l.peek() == '(' {
			return l.skipPast(')')
		}
		if lower != "group_left" && lower != "group_right" {
			return fmt.Errorf("%s without its label list at %d", word, l.i)
		}
	case promKeywords[lower]:
	case l.peek() == '(':
		if !promFunctions[word] {
			return fmt.Errorf("unknown function %s at %d", word, start)
		}
		l.pending = word
	default:
		return l.selector(word)
	}
	return nil
}

// selector records a vector selector named name ("" if it has none), and
// reads its matchers if they follow.
func (l *promLexer) selector(name string) error {
	ref := MetricRef{Name: name}
	for _, call := range l.calls {
		if call != "" {
			ref.Within = append(ref.Within, call)
		}
	}
	if l.peek() == '{' {
		l.i++
		var err error
		if ref.Matchers, err = l.matchers(); err != nil {
			return err
		}
	}
	for _, m := range ref.Matchers {
		switch {
		case m.Name == "__name__" && m.Op == "=":
			if ref.Name != "" && ref.Name != m.Value {
				return fmt.Errorf("selector named both %s and %s", ref.Name, m.Value)
			}
			ref.Name = m.Value
		case m.Name == "__name__":
			return fmt.Errorf("__name__%s%q: the metrics it selects cannot be known", m.Op, m.Value)
		}
	}
	if ref.Name == "" {
		return fmt.Errorf("a selector without a metric name at %d", l.i)
	}
	l.refs = append(l.refs, ref)
	return nil
}

// matchers reads label matchers up to the closing brace. A quoted name
// alone is a metric name (Prometheus 3's syntax for names that are not
// identifiers).
func (l *promLexer) matchers() ([]LabelMatcher, error) {
	var ms []LabelMatcher
	for {
		switch l.peek() {
		case '}':
			l.i++
			return ms, nil
		case 0:
			return nil, fmt.Errorf("unclosed {")
		}
		var name string
		var err error
		if c := l.s[l.i]; c == '"' || c == '\'' || c == '`' {
			if name, err = l.str(); err != nil {
				return nil, err
			}
			if c := l.peek(); c == ',' || c == '}' {
				ms = append(ms, LabelMatcher{"__name__", "=", name})
				if c == ',' {
					l.i++
				}
				continue
			}
		} else {
			start := l.i
			for l.i < len(l.s) && isIdentChar(l.s[l.i]) {
				l.i++
			}
			if name = l.s[start:l.i]; name == "" || strings.Contains(name, ":") {
				return nil, fmt.Errorf("no label name at %d", start)
			}
		}
		l.skipSpace()
		var op string
		for _, o := range []string{"=~", "!~", "!=", "="} {
			if strings.HasPrefix(l.s[l.i:], o) {
				op = o
				break
			}
		}
		if op == "" {
			return nil, fmt.Errorf("no matcher operator after %s at %d", name, l.i)
		}
		l.i += len(op)
		if c := l.peek(); c != '"' && c != '\'' && c != '`' {
			return nil, fmt.Errorf("the value of %s%s is not a string at %d", name, op, l.i)
		}
		value, err := l.str()
		if err != nil {
			return nil, err
		}
		ms = append(ms, LabelMatcher{name, op, value})
		switch l.peek() {
		case ',':
			l.i++
		case '}':
		case 0:
			return nil, fmt.Errorf("unclosed {")
		default:
			return nil, fmt.Errorf("expected , or } at %d", l.i)
		}
	}
}

// str reads a quoted string and returns its content, escapes undone only as
// far as a matcher's value needs (\" and \\); raw `strings` have none.
func (l *promLexer) str() (string, error) {
	quote, start := l.s[l.i], l.i
	var b strings.Builder
	for l.i++; l.i < len(l.s); l.i++ {
		c := l.s[l.i]
		switch {
		case c == quote:
			l.i++
			return b.String(), nil
		case c == '\\' && quote != '`' && l.i+1 < len(l.s):
			l.i++
			b.WriteByte(l.s[l.i])
		case c == '\n' && quote != '`':
			return "", fmt.Errorf("newline in string at %d", l.i)
		default:
			b.WriteByte(c)
		}
	}
	return "", fmt.Errorf("unterminated string at %d", start)
}

// skipPast skips to the closing character (')' of a label list, ']' of a
// range or subquery), past strings and Grafana variables; another bracket
// before it is an error.
func (l *promLexer) skipPast(closing byte) error {
	start := l.i
	for l.i++; l.i < len(l.s); {
		switch c := l.s[l.i]; {
		case c == closing:
			l.i++
			return nil
		case c == '"' || c == '\'' || c == '`':
			if _, err := l.str(); err != nil {
				return err
			}
		case c == '$':
			if err := l.variable(); err != nil {
				return err
			}
		case strings.IndexByte("()[]{}", c) >= 0:
			return fmt.Errorf("unexpected %q before the %q of %q at %d", c, closing, l.s[start], start)
		default:
			l.i++
		}
	}
	return fmt.Errorf("unclosed %q at %d", l.s[start], start)
}

// variable skips a Grafana variable: $name or ${name...}.
func (l *promLexer) variable() error {
	start := l.i
	l.i++
	if l.i < len(l.s) && l.s[l.i] == '{' {
		end := strings.IndexByte(l.s[l.i:], '}')
		if end < 0 {
			return fmt.Errorf("unclosed ${ at %d", start)
		}
		l.i += end + 1
		return nil
	}
	for l.i < len(l.s) && isIdentChar(l.s[l.i]) && l.s[l.i] != ':' {
		l.i++
	}
	if l.i == start+1 {
		return fmt.Errorf("a lone $ at %d", start)
	}
	return nil
}

// number skips a number or a duration: 0.99, 1e-3, 0x1f, 5m, 1h30m.
func (l *promLexer) number() {
	start := l.i
	for l.i < len(l.s) {
		c := l.s[l.i]
		switch {
		case isIdentChar(c) && c != ':' || c == '.':
			l.i++
		case (c == '+' || c == '-') && (l.s[l.i-1] == 'e' || l.s[l.i-1] == 'E') &&
			!strings.HasPrefix(strings.ToLower(l.s[start:]), "0x") && l.i+1 < len(l.s) && isDigit(l.s[l.i+1]):
			l.i++ // an exponent's sign
		default:
			return
		}
	}
}

func isDigit(c byte) bool {
	return c >= '0' && c <= '9'
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdentChar(c byte) bool {
	return isIdentStart(c) || isDigit(c)
}
