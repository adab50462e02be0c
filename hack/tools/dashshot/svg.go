package main

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The look: a dark theme close to Grafana's default, so that the picture
// reads like the dashboard an operator would open. The sizes are Grafana's
// grid (24 columns, 30 px per grid unit), scaled to the picture's width.
const (
	unitHeight  = 30.0
	panelGap    = 6.0
	headerH     = 56.0
	pageMargin  = 10.0
	fontFamily  = "Inter, Helvetica, Arial, sans-serif"
	charWidth   = 0.58 // of the font size: the average width of a glyph, to lay text out without measuring it
	colorBG     = "#111217"
	colorPanel  = "#181b1f"
	colorBorder = "#2c3037"
	colorText   = "#d8d9e0"
	colorMuted  = "#8e909c"
	colorGrid   = "#272a31"
)

// namedColors are the colour names the dashboard's thresholds, mappings and
// overrides use.
var namedColors = map[string]string{
	"green":  "#73bf69",
	"red":    "#f2495c",
	"blue":   "#5794f2",
	"orange": "#ff9830",
	"yellow": "#fade2a",
	"purple": "#b877d9",
	"text":   colorText,
}

// palette colours the series of a panel in order, distinct on a dark
// background, the first eight far apart.
var palette = []string{
	"#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c",
	"#b877d9", "#6ed0e0", "#ff9eb5", "#1f60c4", "#c8f2c2",
	"#a16d00", "#705da0", "#37872d", "#fade2a", "#ba43a6",
}

func colorOf(name string) string {
	if c, ok := namedColors[name]; ok {
		return c
	}
	if strings.HasPrefix(name, "#") {
		return name
	}
	return colorText
}

// drawnSeries is one series of a panel, named and ready to draw.
type drawnSeries struct {
	Name   string
	Points []point
	Color  string
	Dash   string // stroke-dasharray, empty for a solid line
}

// panelData is what the queries of one panel returned.
type panelData struct {
	Series []drawnSeries
	Errors []string
}

// canvas accumulates SVG elements.
type canvas struct {
	b strings.Builder
}

var xmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;")

func (c *canvas) printf(format string, args ...any) { fmt.Fprintf(&c.b, format, args...) }

func (c *canvas) rect(x, y, w, h float64, fill, stroke string, radius float64) {
	c.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="%.1f" fill="%s"`, x, y, w, h, radius, fill)
	if stroke != "" {
		c.printf(` stroke="%s"`, stroke)
	}
	c.printf("/>\n")
}

// text writes s at (x, y), y being the baseline; anchor is start, middle or
// end.
func (c *canvas) text(x, y, size float64, color, anchor, weight, s string) {
	c.printf(`<text x="%.1f" y="%.1f" font-size="%.1f" fill="%s" text-anchor="%s" font-weight="%s">%s</text>`+"\n",
		x, y, size, color, anchor, weight, xmlEscaper.Replace(s))
}

func (c *canvas) line(x1, y1, x2, y2 float64, color string, width float64) {
	c.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"/>`+"\n", x1, y1, x2, y2, color, width)
}

// clip cuts s to fit width at font size size, with an ellipsis.
func clip(s string, width, size float64) string {
	maxChars := int(width / (size * charWidth))
	r := []rune(s)
	if len(r) <= maxChars {
		return s
	}
	if maxChars <= 1 {
		return ""
	}
	return string(r[:maxChars-1]) + "…"
}

// picture is everything the renderer draws on one page.
type picture struct {
	Dashboard  *dashboard
	Data       []panelData // by index into Dashboard.Panels
	Start, End time.Time
	Step       time.Duration
	Width      float64
	Subtitle   string
}

func (p *picture) svg() string {
	colW := (p.Width - 2*pageMargin) / 24
	bottom := 0
	for _, pn := range p.Dashboard.Panels {
		bottom = max(bottom, pn.GridPos.Y+pn.GridPos.H)
	}
	height := headerH + float64(bottom)*unitHeight + pageMargin
	var c canvas
	c.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="%s">`+"\n",
		p.Width, height, p.Width, height, fontFamily)
	c.rect(0, 0, p.Width, height, colorBG, "", 0)
	c.text(pageMargin+4, 26, 20, colorText, "start", "600", p.Dashboard.Title)
	c.text(p.Width-pageMargin-4, 26, 13, colorMuted, "end", "400",
		fmt.Sprintf("%s to %s UTC (%s), step %s", p.Start.UTC().Format("2006-01-02 15:04:05"), p.End.UTC().Format("15:04:05"),
			p.End.Sub(p.Start).Round(time.Second), p.Step))
	if p.Subtitle != "" {
		c.text(pageMargin+4, 46, 12, colorMuted, "start", "400", p.Subtitle)
	}
	for i, pn := range p.Dashboard.Panels {
		g := pn.GridPos
		x := pageMargin + float64(g.X)*colW
		y := headerH + float64(g.Y)*unitHeight
		w := float64(g.W)*colW - panelGap
		h := float64(g.H)*unitHeight - panelGap
		if pn.Type == "row" {
			c.text(x+4, y+unitHeight*0.6, 15, colorText, "start", "600", pn.Title)
			continue
		}
		c.rect(x, y, w, h, colorPanel, colorBorder, 3)
		c.text(x+8, y+18, 13, colorText, "start", "600", clip(pn.Title, w-16, 13))
		body := box{x + 8, y + 26, w - 16, h - 32}
		d := p.Data[i]
		switch {
		case len(d.Errors) > 0:
			for j, e := range d.Errors {
				c.text(body.x, body.y+14+float64(j)*14, 11, namedColors["red"], "start", "400", clip("query error: "+e, body.w, 11))
			}
		case pn.Type == "stat":
			p.drawStat(&c, pn, d, body)
		case len(d.Series) == 0:
			c.text(body.x+body.w/2, body.y+body.h/2, 14, colorMuted, "middle", "400", "No data")
		case pn.Type == "state-timeline":
			p.drawStateTimeline(&c, pn, d, body)
		default:
			// timeseries, and any other type: a graph of its series is
			// closer to the truth than nothing.
			p.drawTimeSeries(&c, pn, d, body)
		}
	}
	c.printf("</svg>\n")
	return c.b.String()
}

type box struct{ x, y, w, h float64 }

// lastNotNull is the stat panels' reduction: the series' last value.
func lastNotNull(s drawnSeries) (float64, bool) {
	if len(s.Points) == 0 {
		return 0, false
	}
	return s.Points[len(s.Points)-1].V, true
}

// thresholdColor is the colour of the highest step at or below v.
func thresholdColor(t thresholds, v float64) string {
	color := ""
	for _, s := range t.Steps {
		if s.Value == nil || v >= *s.Value {
			color = s.Color
		}
	}
	if color == "" {
		return colorText
	}
	return colorOf(color)
}

func (p *picture) drawStat(c *canvas, pn panel, d panelData, b box) {
	if len(d.Series) == 0 {
		c.text(b.x+b.w/2, b.y+b.h/2+6, 16, colorMuted, "middle", "400", "No data")
		return
	}
	mode := pn.Options.TextMode
	if mode == "" || mode == "auto" {
		mode = "value"
		if len(d.Series) > 1 {
			mode = "value_and_name"
		}
	}
	// The values side by side, as Grafana lays out a wide stat panel.
	cellW := b.w / float64(len(d.Series))
	for i, s := range d.Series {
		v, _ := lastNotNull(s)
		color := s.Color
		if color == "" {
			color = thresholdColor(pn.FieldConfig.Defaults.Thresholds, v)
		}
		cx := b.x + cellW*float64(i) + cellW/2
		var main, caption string
		switch mode {
		case "name":
			main = s.Name
		case "value_and_name":
			main, caption = formatValue(v, pn.FieldConfig.Defaults.Unit), s.Name
		default:
			main = formatValue(v, pn.FieldConfig.Defaults.Unit)
		}
		size := math.Min(b.h*0.55, cellW*0.9/(float64(len([]rune(main)))*charWidth))
		size = math.Max(size, 10)
		mid := b.y + b.h/2
		if caption != "" {
			c.text(cx, b.y+14, 12, colorMuted, "middle", "400", clip(caption, cellW-4, 12))
			mid += 8
			size = math.Min(size, b.h*0.45)
		}
		c.text(cx, mid+size*0.36, size, color, "middle", "600", main)
	}
}

// timeAxis draws the time ticks under a plot from start to end.
func (p *picture) timeAxis(c *canvas, plot box, grid bool) {
	span := p.End.Sub(p.Start)
	steps := []time.Duration{10 * time.Second, 15 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute,
		5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 6 * time.Hour}
	// About one label per 60 px: a 6-column panel gets three or four.
	want := span / time.Duration(max(1, int(plot.w/60)))
	step := steps[len(steps)-1]
	for _, s := range steps {
		if s >= want {
			step = s
			break
		}
	}
	layout := "15:04"
	if step < time.Minute {
		layout = "15:04:05"
	}
	for t := p.Start.Truncate(step); !t.After(p.End); t = t.Add(step) {
		if t.Before(p.Start) {
			continue
		}
		x := plot.x + plot.w*float64(t.Sub(p.Start))/float64(span)
		if grid {
			c.line(x, plot.y, x, plot.y+plot.h, colorGrid, 1)
		}
		// A label that would stick out of the plot runs into the value
		// axis' labels: leave it out, its grid line says enough.
		label := t.UTC().Format(layout)
		if half := float64(len(label)) * 10 * charWidth / 2; x-half < plot.x || x+half > plot.x+plot.w {
			continue
		}
		c.text(x, plot.y+plot.h+12, 10, colorMuted, "middle", "400", label)
	}
}

func (p *picture) xOf(plot box, t time.Time) float64 {
	return plot.x + plot.w*float64(t.Sub(p.Start))/float64(p.End.Sub(p.Start))
}

// legend lays the series' names out in rows under the plot, and returns
// the height it took. At most maxRows rows: the rest are counted.
func legend(c *canvas, series []drawnSeries, x, bottom, w float64, maxRows int) float64 {
	const size, rowH = 10.5, 14.0
	type item struct {
		s drawnSeries
		x float64
	}
	var rows [][]item
	cur, cx := []item{}, 0.0
	for _, s := range series {
		iw := 14 + float64(len([]rune(s.Name)))*size*charWidth + 12
		iw = math.Min(iw, w)
		if cx+iw > w && len(cur) > 0 {
			rows, cur, cx = append(rows, cur), []item{}, 0
		}
		cur = append(cur, item{s, cx})
		cx += iw
	}
	if len(cur) > 0 {
		rows = append(rows, cur)
	}
	hidden := 0
	if len(rows) > maxRows {
		for _, r := range rows[maxRows-1:] {
			hidden += len(r)
		}
		rows = rows[:maxRows-1]
	}
	n := len(rows)
	if hidden > 0 {
		n++
	}
	top := bottom - float64(n)*rowH
	for i, r := range rows {
		y := top + float64(i)*rowH + 10
		for _, it := range r {
			dash := ""
			if it.s.Dash != "" {
				dash = ` stroke-dasharray="4,3"`
			}
			c.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"%s/>`+"\n",
				x+it.x, y-3.5, x+it.x+10, y-3.5, it.s.Color, dash)
			c.text(x+it.x+14, y, size, colorMuted, "start", "400", clip(it.s.Name, w-it.x-14, size))
		}
	}
	if hidden > 0 {
		c.text(x, top+float64(len(rows))*rowH+10, size, colorMuted, "start", "400", fmt.Sprintf("… and %d more series", hidden))
	}
	return float64(n) * rowH
}

func (p *picture) drawTimeSeries(c *canvas, pn panel, d panelData, b box) {
	def := pn.FieldConfig.Defaults
	legendH := 0.0
	if pn.Options.Legend == nil || pn.Options.Legend.ShowLegend {
		legendH = legend(c, d.Series, b.x, b.y+b.h, b.w, max(1, int(b.h*0.35/14)))
	}
	// The value range: the panel's min and max where set, else the data's,
	// from zero when the data is all positive, as Grafana's soft minimum.
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range d.Series {
		for _, pt := range s.Points {
			lo, hi = math.Min(lo, pt.V), math.Max(hi, pt.V)
		}
	}
	if lo > 0 {
		lo = 0
	}
	if def.Min != nil {
		lo = *def.Min
	}
	if def.Max != nil {
		hi = *def.Max
	}
	if hi <= lo {
		hi = lo + 1
	}
	plotTop, plotBottom := b.y+4, b.y+b.h-legendH-18
	// Bytes are shown in KiB, MiB, GiB: ticks at round decimal numbers of
	// bytes would read 9.54 MiB, so pick them in the unit shown.
	scale := 1.0
	for def.Unit == "bytes" && math.Max(math.Abs(lo), math.Abs(hi))/scale >= 1024 {
		scale *= 1024
	}
	ticks, lo2, hi2 := niceTicks(lo/scale, hi/scale, max(2, int((plotBottom-plotTop)/30)))
	lo2, hi2 = lo2*scale, hi2*scale
	for i := range ticks {
		ticks[i] *= scale
	}
	if def.Min == nil {
		lo = lo2
	}
	if def.Max == nil {
		hi = hi2
	}
	labelW := 0.0
	for _, t := range ticks {
		labelW = math.Max(labelW, float64(len([]rune(formatValue(t, def.Unit))))*10*charWidth)
	}
	plot := box{b.x + labelW + 6, plotTop, b.w - labelW - 8, plotBottom - plotTop}
	yOf := func(v float64) float64 { return plot.y + plot.h - plot.h*(v-lo)/(hi-lo) }
	for _, t := range ticks {
		if t < lo-1e-9 || t > hi+1e-9 {
			continue
		}
		y := yOf(t)
		c.line(plot.x, y, plot.x+plot.w, y, colorGrid, 1)
		c.text(plot.x-5, y+3.5, 10, colorMuted, "end", "400", formatValue(t, def.Unit))
	}
	p.timeAxis(c, plot, true)
	c.printf("<g>\n")
	for i, s := range d.Series {
		if def.Custom.DrawStyle == "points" {
			// Series of points often share a value (the rollout phases are
			// all 1): each later series is drawn smaller, so that one whose
			// points lie under another's still shows as a ring around them
			// where Grafana would hide it.
			r := math.Max(def.Custom.PointSize, 4)/2 + 1.5*float64(len(d.Series)-1-i)
			for _, pt := range s.Points {
				c.printf(`<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s"/>`+"\n", p.xOf(plot, pt.T), yOf(clamp(pt.V, lo, hi)), r, s.Color)
			}
			continue
		}
		for _, seg := range segments(s.Points, p.Step) {
			if len(seg) == 1 {
				c.printf(`<circle cx="%.1f" cy="%.1f" r="1.8" fill="%s"/>`+"\n", p.xOf(plot, seg[0].T), yOf(clamp(seg[0].V, lo, hi)), s.Color)
				continue
			}
			var pts strings.Builder
			for _, pt := range seg {
				fmt.Fprintf(&pts, "%.1f,%.1f ", p.xOf(plot, pt.T), yOf(clamp(pt.V, lo, hi)))
			}
			dash := ""
			if s.Dash != "" {
				dash = ` stroke-dasharray="` + s.Dash + `"`
			}
			c.printf(`<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5" stroke-linejoin="round"%s/>`+"\n",
				strings.TrimSpace(pts.String()), s.Color, dash)
		}
	}
	c.printf("</g>\n")
}

func clamp(v, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, v)) }

// segments splits points where a step or more is missing, so that a series
// that disappeared (a rollout's gauges between rollouts) shows a gap, not a
// line across it.
func segments(pts []point, step time.Duration) [][]point {
	var out [][]point
	start := 0
	for i := 1; i <= len(pts); i++ {
		if i == len(pts) || pts[i].T.Sub(pts[i-1].T) > step*3/2 {
			out = append(out, pts[start:i])
			start = i
		}
	}
	return out
}

// drawStateTimeline draws one lane per series, coloured by the value
// mappings (or thresholds) of each stretch of equal values.
func (p *picture) drawStateTimeline(c *canvas, pn panel, d panelData, b box) {
	def := pn.FieldConfig.Defaults
	nameW := 0.0
	for _, s := range d.Series {
		nameW = math.Max(nameW, float64(len([]rune(s.Name)))*10.5*charWidth)
	}
	nameW = math.Min(nameW, b.w*0.35)
	plot := box{b.x + nameW + 8, b.y + 2, b.w - nameW - 10, b.h - 18}
	laneH := plot.h / float64(len(d.Series))
	for i, s := range d.Series {
		y := plot.y + float64(i)*laneH
		c.text(plot.x-6, y+laneH/2+4, 10.5, colorMuted, "end", "400", clip(s.Name, nameW, 10.5))
		for _, seg := range segments(s.Points, p.Step) {
			// Runs of one value within the segment; each point holds until
			// the next, the last for one step.
			for j := 0; j < len(seg); {
				k := j
				for k+1 < len(seg) && seg[k+1].V == seg[j].V {
					k++
				}
				end := seg[k].T.Add(p.Step)
				if k+1 < len(seg) {
					end = seg[k+1].T
				}
				color := thresholdColor(def.Thresholds, seg[j].V)
				for _, m := range def.Mappings {
					if r, ok := m.Options[strconv.FormatFloat(seg[j].V, 'f', -1, 64)]; ok && m.Type == "value" && r.Color != "" {
						color = colorOf(r.Color)
					}
				}
				x1, x2 := p.xOf(plot, seg[j].T), math.Min(p.xOf(plot, end), plot.x+plot.w)
				c.rect(x1, y+2, math.Max(x2-x1, 1), laneH-4, color, "", 0)
				if label := mappedText(def.Mappings, seg[j].V); label != "" && x2-x1 > float64(len(label))*10*charWidth+8 {
					c.text((x1+x2)/2, y+laneH/2+4, 10, colorBG, "middle", "600", label)
				}
				j = k + 1
			}
		}
	}
	p.timeAxis(c, plot, false)
}

func mappedText(ms []mapping, v float64) string {
	for _, m := range ms {
		if r, ok := m.Options[strconv.FormatFloat(v, 'f', -1, 64)]; ok && m.Type == "value" {
			return r.Text
		}
	}
	return ""
}

// styleSeries names and colours a panel's series: palette colours in order,
// then the panel's overrides by name or regular expression (fixed colours,
// dashed lines).
func styleSeries(pn panel, ss []drawnSeries) {
	for i := range ss {
		ss[i].Color = palette[i%len(palette)]
		if pn.Type == "stat" {
			// Stat values take their colour from the thresholds unless an
			// override fixes it.
			ss[i].Color = ""
		}
		if d := pn.FieldConfig.Defaults.Custom.LineStyle; d.Fill == "dash" {
			ss[i].Dash = dashArray(d.Dash)
		}
	}
	for _, o := range pn.FieldConfig.Overrides {
		var match func(string) bool
		switch o.Matcher.ID {
		case "byName":
			match = func(n string) bool { return n == o.Matcher.Options }
		case "byRegexp":
			re, err := regexp.Compile("^(?:" + o.Matcher.Options + ")$")
			if err != nil {
				continue
			}
			match = re.MatchString
		default:
			continue
		}
		for i := range ss {
			if !match(ss[i].Name) {
				continue
			}
			for _, prop := range o.Properties {
				switch prop.ID {
				case "color":
					var v struct {
						FixedColor string `json:"fixedColor"`
					}
					if json.Unmarshal(prop.Value, &v) == nil && v.FixedColor != "" {
						ss[i].Color = colorOf(v.FixedColor)
					}
				case "custom.lineStyle":
					var v lineStyle
					if json.Unmarshal(prop.Value, &v) == nil && v.Fill == "dash" {
						ss[i].Dash = dashArray(v.Dash)
					}
				}
			}
		}
	}
}

func dashArray(d []float64) string {
	if len(d) == 0 {
		d = []float64{10, 10}
	}
	var parts []string
	for _, v := range d {
		// Grafana's dash lengths are for its 1 px lines on a big screen;
		// halved they read the same in a 6-column panel of this picture.
		parts = append(parts, strconv.FormatFloat(v/2, 'f', -1, 64))
	}
	return strings.Join(parts, ",")
}
