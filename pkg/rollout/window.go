package rollout

import (
	"fmt"
	"iter"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Window is a recurring maintenance window: the hours of some days of the
// week, in a time zone, during which a rollout may restart game servers.
//
// It is written "[DAYS ]HH:MM-HH:MM[ ZONE]", for example
//
//	"02:00-06:00"                       every day, UTC
//	"Mon-Fri 02:00-06:00 Europe/Berlin" weekdays, Berlin time
//	"Sat,Sun 22:00-04:00 America/New_York"
//
// DAYS are three-letter day names, ranges of them, or both, separated by
// commas; without DAYS the window opens every day. A window whose end is not
// after its start ends the next day: "Sat 22:00-04:00" opens Saturday night
// and closes on Sunday morning. "24:00" ends a window at midnight. ZONE is an
// IANA time zone name, UTC if absent.
//
// Each opening starts when the zone's clocks first show the start time that
// day, or when they jump past it if they skip it, and lasts the written
// length (end minus start) in real time, so a change of the clocks neither
// shortens nor lengthens it, nor makes it vanish: "Sun 02:00-03:00
// America/New_York" opens at 03:00 EDT the Sunday 02:00 EST becomes 03:00
// EDT, and closes at 04:00 EDT. The exception is a whole day,
// "00:00-24:00": it is open the whole day, however long the change of the
// clocks makes it.
type Window struct {
	days       [7]bool // by time.Weekday
	start, end int     // minutes since midnight; end may be <= start (the next day)
	location   *time.Location
	spec       string
}

// ParseWindow parses a maintenance window (see [Window]). Its errors quote the
// value and say what is expected.
func ParseWindow(s string) (*Window, error) {
	bad := func(why string) error {
		return fmt.Errorf(`invalid value %q: %s; want "[DAYS ]HH:MM-HH:MM[ ZONE]" such as "Mon-Fri 02:00-06:00 Europe/Berlin"`, s, why)
	}
	fields := strings.Fields(s)
	if len(fields) == 0 || len(fields) > 3 {
		return nil, bad("want one to three parts")
	}
	w := &Window{location: time.UTC, spec: strings.Join(fields, " ")}
	// The hours are the only part with a colon: find them, and the days
	// before them and the zone after them.
	hours := -1
	for i, f := range fields {
		if strings.Contains(f, ":") {
			hours = i
			break
		}
	}
	if hours < 0 || hours > 1 || len(fields)-hours > 2 {
		return nil, bad("no HH:MM-HH:MM")
	}
	if hours == 1 {
		if err := w.parseDays(fields[0]); err != nil {
			return nil, bad(err.Error())
		}
	} else {
		w.days = [7]bool{true, true, true, true, true, true, true}
	}
	from, to, ok := strings.Cut(fields[hours], "-")
	if !ok {
		return nil, bad("no HH:MM-HH:MM")
	}
	var err error
	if w.start, err = parseClock(from, false); err != nil {
		return nil, bad(err.Error())
	}
	if w.end, err = parseClock(to, true); err != nil {
		return nil, bad(err.Error())
	}
	if w.start == w.end%(24*60) && w.end != 24*60 {
		return nil, bad("the window is empty, or has no end: use 00:00-24:00 for a whole day")
	}
	if hours+1 < len(fields) {
		zone := fields[hours+1]
		if w.location, err = loadLocation(zone); err != nil || zone == "Local" {
			return nil, bad(fmt.Sprintf("unknown time zone %q", zone))
		}
	}
	return w, nil
}

// locations caches the time zones windows name: a policy is parsed at every
// sync of every session of its profile, and time.LoadLocation decodes the
// zone's rules each time it is called.
var locations sync.Map // zone name → *time.Location

func loadLocation(zone string) (*time.Location, error) {
	if loc, ok := locations.Load(zone); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, err
	}
	locations.Store(zone, loc)
	return loc, nil
}

var weekdays = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
}

// parseDays parses "Mon-Fri", "Sat,Sun", "Mon,Wed-Fri". A range may wrap
// around the week: "Fri-Mon" is Friday to Monday.
func (w *Window) parseDays(s string) error {
	for part := range strings.SplitSeq(s, ",") {
		first, last, isRange := strings.Cut(part, "-")
		a, okA := weekdays[strings.ToLower(first)]
		b, okB := a, true
		if isRange {
			b, okB = weekdays[strings.ToLower(last)]
		}
		if !okA || !okB {
			return fmt.Errorf("unknown days %q (want Mon, Tue, Wed, Thu, Fri, Sat, Sun, ranges like Mon-Fri)", part)
		}
		for d := a; ; d = (d + 1) % 7 {
			w.days[d] = true
			if d == b {
				break
			}
		}
	}
	return nil
}

// parseClock parses "HH:MM" into minutes since midnight; "24:00" only as an
// end.
func parseClock(s string, end bool) (int, error) {
	h, m, ok := strings.Cut(s, ":")
	hour, errH := strconv.Atoi(h)
	minute, errM := strconv.Atoi(m)
	switch {
	case !ok || len(h) != 2 || len(m) != 2 || errH != nil || errM != nil:
	case end && hour == 24 && minute == 0:
		return 24 * 60, nil
	case hour >= 0 && hour < 24 && minute >= 0 && minute < 60:
		return hour*60 + minute, nil
	}
	return 0, fmt.Errorf("bad time %q", s)
}

// String is the window as written, its fields separated by single spaces.
func (w *Window) String() string { return w.spec }

// Open reports whether t is within the window.
func (w *Window) Open(t time.Time) bool {
	for _, o := range w.openings(t, -openingSpanDays, 0) {
		if !t.Before(o[0]) && t.Before(o[1]) {
			return true
		}
	}
	return false
}

// NextOpen returns t if the window is open at t, else when it opens next.
func (w *Window) NextOpen(t time.Time) time.Time {
	if w.Open(t) {
		return t
	}
	for _, o := range w.openings(t, 0, 8) {
		if o[0].After(t) {
			return o[0]
		}
	}
	return time.Time{} // no day is ever set: ParseWindow does not return such a window
}

// NextClose returns when the window open at t closes; the zero time if it
// is not open at t. An opening that the next one starts within (one longer
// than a day the clocks go forward) closes when that one does.
func (w *Window) NextClose(t time.Time) time.Time {
	var closes time.Time
	for _, o := range w.openings(t, -openingSpanDays, openingSpanDays) {
		covers := !t.Before(o[0]) && t.Before(o[1])
		if (covers || o[0].Before(closes)) && o[1].After(closes) {
			closes = o[1]
		}
	}
	return closes
}

// OpenDuration returns how long the window is open between from and to: 0
// if to is not after from. It is real time, not wall-clock time: an opening
// across a change of the clocks counts the hours that pass. Its cost grows
// with the days between from and to.
func (w *Window) OpenDuration(from, to time.Time) time.Duration {
	var open time.Duration
	if !to.After(from) {
		return open
	}
	days := int(to.Sub(from)/(24*time.Hour)) + 2
	for start, end := range w.openTimes(from, days) {
		if !start.Before(to) {
			break
		}
		if end.After(to) {
			end = to
		}
		open += end.Sub(start)
	}
	return open
}

// AfterOpen returns the earliest instant by which the window has been open
// for d since from: OpenDuration(from, AfterOpen(from, d)) == d. It is from
// for a d that is not positive, and the zero time if the window is not open
// that long within openHorizonDays of from, which a caller waiting for it
// reads as never. It steps from opening to opening, so a short window and a
// long d cost at most one step a day of the horizon.
func (w *Window) AfterOpen(from time.Time, d time.Duration) time.Time {
	if d <= 0 {
		return from
	}
	if d > w.mostOpenWithin(openHorizonDays) {
		return time.Time{} // no need to walk the horizon to know
	}
	left := d
	for start, end := range w.openTimes(from, openHorizonDays) {
		if open := end.Sub(start); open < left {
			left -= open
			continue
		}
		return start.Add(left).In(from.Location())
	}
	return time.Time{}
}

// openHorizonDays bounds AfterOpen's search: ten years, beyond which a wait
// is as good as for ever, and which keeps a long max-defer under a short
// window from costing more than a few thousand steps.
const openHorizonDays = 10 * 366

// mostOpenWithin bounds how long openTimes can yield over days days: each
// weekday the window opens on comes at most days/7+2 times in them and the
// openingSpanDays before, and each opening lasts the window's length, a
// whole day at most 25 hours.
func (w *Window) mostOpenWithin(days int) time.Duration {
	opening := w.length()
	if w.wholeDay() {
		opening += time.Hour
	}
	open := 0
	for _, set := range w.days {
		if set {
			open++
		}
	}
	return time.Duration(open*(days/7+2)) * opening
}

// length is how long each opening lasts: from start to end on the clock,
// the next day's end if it is not after the start, 24 hours for
// "00:00-24:00" (whose opening lasts its day instead: openingOn).
func (w *Window) length() time.Duration {
	return time.Duration((w.end-w.start+24*60-1)%(24*60)+1) * time.Minute
}

// openingSpanDays is how many days before a day an opening that is still
// open on it can start: an opening lasts at most 24 hours, and a day the
// clocks go forward is shorter than that, so an opening can run past the
// next midnight into a third day, never a fourth.
const openingSpanDays = 2

// openTimes yields the times the window is open from from on, as intervals
// [start, end) in order, that neither overlap nor start before from: the
// openings that start on the days from openingSpanDays before from's to days
// after it, in the window's zone, cut to what follows from and to what
// earlier openings did not cover (an opening that runs across a day shorter
// than itself overlaps the next one). So they are the instants at which Open
// is true.
func (w *Window) openTimes(from time.Time, days int) iter.Seq2[time.Time, time.Time] {
	return func(yield func(time.Time, time.Time) bool) {
		local := from.In(w.location)
		covered := from
		for offset := -openingSpanDays; offset <= days; offset++ {
			start, end, ok := w.openingOn(local, offset)
			if !ok {
				continue
			}
			if start.Before(covered) {
				start = covered
			}
			if !end.After(start) {
				continue // over before from, or covered by the opening before
			}
			if !yield(start, end) {
				return
			}
			covered = end
		}
	}
}

// openings returns the window's openings that start on the days from first
// to last days after t's day, in the window's zone, in order.
func (w *Window) openings(t time.Time, first, last int) [][2]time.Time {
	local := t.In(w.location)
	var out [][2]time.Time
	for offset := first; offset <= last; offset++ {
		if start, end, ok := w.openingOn(local, offset); ok {
			out = append(out, [2]time.Time{start, end})
		}
	}
	return out
}

// openingOn returns the opening that starts offset days after local's day,
// in the window's zone, if the window opens that day. The weekday is
// counted, not looked up: a day the window skips costs no date arithmetic,
// which AfterOpen's long walks over weekly windows are mostly made of.
func (w *Window) openingOn(local time.Time, offset int) (start, end time.Time, ok bool) {
	if !w.days[((int(local.Weekday())+offset)%7+7)%7] {
		return start, end, false
	}
	start = w.firstShowing(time.Date(local.Year(), local.Month(), local.Day()+offset, w.start/60, w.start%60, 0, 0, time.UTC))
	if w.wholeDay() {
		// The whole day, however long the change of the clocks makes it:
		// "00:00-24:00" means every moment of the day, which a user reads
		// as always open.
		return start, w.firstShowing(time.Date(local.Year(), local.Month(), local.Day()+offset+1, 0, 0, 0, 0, time.UTC)), true
	}
	return start, start.Add(w.length()), true
}

// wholeDay reports whether the window is written 00:00-24:00.
func (w *Window) wholeDay() bool {
	return w.start == 0 && w.end == 24*60
}

// firstShowing returns the first instant at which the clocks of the
// window's zone show clock, a wall-clock time written as if in UTC, or a
// later time: the first of two instants that show it the day the clocks go
// back, the instant they jump past it the day they skip it. time.Date does
// not do this: which of the zone's offsets it takes for such a time is left
// unsaid, and it is not the same in every zone.
//
// It walks the zone's periods of one offset from the one in force 15 hours
// before clock read as UTC, when no zone's clocks show it yet (none is 15
// hours from UTC), and stops at the first whose clocks reach clock.
func (w *Window) firstShowing(clock time.Time) time.Time {
	for t := clock.Add(-15 * time.Hour); ; {
		local := t.In(w.location)
		_, offset := local.Zone()
		from, until := local.ZoneBounds() // zero: the period has no bound on that side
		at := clock.Add(-time.Duration(offset) * time.Second)
		if !from.IsZero() && at.Before(from) {
			return from.In(w.location) // the clocks jumped past clock as this period began
		}
		if until.IsZero() || at.Before(until) {
			return at.In(w.location)
		}
		t = until
	}
}
