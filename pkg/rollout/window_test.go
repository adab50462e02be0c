package rollout

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestParseWindowRefuses(t *testing.T) {
	for _, in := range []string{
		"", "02:00", "2:00-06:00", "02:00-6:00", "02:00-06:60", "25:00-26:00", "02:00-02:00", "00:00-00:00",
		"24:00-02:00", "Mon-Fri", "Mo 02:00-06:00", "Mon-Fry 02:00-06:00", "02:00-06:00 Mars/Olympus",
		"02:00-06:00 Local", "Mon 02:00-06:00 UTC extra", "Mon Tue 02:00-06:00",
	} {
		_, err := ParseWindow(in)
		if err == nil {
			t.Errorf("ParseWindow(%q): no error", in)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, `"`+in+`"`) || !strings.Contains(msg, "want") {
			t.Errorf("ParseWindow(%q): error %q should quote the value and say what is expected", in, msg)
		}
	}
}

// mustZone loads a time zone of the tests.
func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// wallTime is the time "2006-01-02 15:04" as the clocks of loc show it.
func wallTime(t *testing.T, loc *time.Location, s string) time.Time {
	t.Helper()
	v, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestWindowTimes(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	at := func(loc *time.Location, s string) time.Time { return wallTime(t, loc, s) }
	utc := func(s string) time.Time { return at(time.UTC, s) }
	tests := []struct {
		window         string
		now            time.Time
		open           bool
		nextOpen, ends time.Time // ends: NextClose, zero when closed
	}{
		// 2026-12-01 is a Tuesday.
		{"02:00-06:00", utc("2026-12-01 03:00"), true, utc("2026-12-01 03:00"), utc("2026-12-01 06:00")},
		{"02:00-06:00", utc("2026-12-01 06:00"), false, utc("2026-12-02 02:00"), time.Time{}},
		{"02:00-06:00", utc("2026-12-01 01:59"), false, utc("2026-12-01 02:00"), time.Time{}},
		{"Mon-Fri 02:00-06:00", utc("2026-12-05 03:00"), false, utc("2026-12-07 02:00"), time.Time{}},
		{"Fri-Mon 02:00-06:00", utc("2026-12-06 03:00"), true, utc("2026-12-06 03:00"), utc("2026-12-06 06:00")},
		{"Fri-Mon 02:00-06:00", utc("2026-12-01 03:00"), false, utc("2026-12-04 02:00"), time.Time{}},
		// Overnight: Saturday's window runs into Sunday.
		{"Sat 22:00-04:00", utc("2026-12-06 03:00"), true, utc("2026-12-06 03:00"), utc("2026-12-06 04:00")},
		{"Sat 22:00-04:00", utc("2026-12-06 23:00"), false, utc("2026-12-12 22:00"), time.Time{}},
		{"22:00-24:00", utc("2026-12-01 23:59"), true, utc("2026-12-01 23:59"), utc("2026-12-02 00:00")},
		{"00:00-24:00", utc("2026-12-01 12:00"), true, utc("2026-12-01 12:00"), utc("2026-12-02 00:00")},
		// Zones: 02:00 in Berlin is 01:00 UTC in winter.
		{"02:00-06:00 Europe/Berlin", utc("2026-12-01 01:30"), true, utc("2026-12-01 01:30"), utc("2026-12-01 05:00")},
		{"02:00-06:00 Europe/Berlin", utc("2026-12-01 05:30"), false, at(berlin, "2026-12-02 02:00"), time.Time{}},
		// The spring change in Berlin (2027-03-28, 02:00 becomes 03:00):
		// the window lasts its five hours that day too, to 07:00.
		{"01:00-06:00 Europe/Berlin", at(berlin, "2027-03-28 01:30"), true, at(berlin, "2027-03-28 01:30"), at(berlin, "2027-03-28 07:00")},
	}
	for _, tc := range tests {
		w, err := ParseWindow(tc.window)
		if err != nil {
			t.Fatalf("ParseWindow(%q): %v", tc.window, err)
		}
		if got := w.Open(tc.now); got != tc.open {
			t.Errorf("%q.Open(%v) = %v, want %v", tc.window, tc.now, got, tc.open)
		}
		if got := w.NextOpen(tc.now); !got.Equal(tc.nextOpen) {
			t.Errorf("%q.NextOpen(%v) = %v, want %v", tc.window, tc.now, got, tc.nextOpen)
		}
		if got := w.NextClose(tc.now); !got.Equal(tc.ends) {
			t.Errorf("%q.NextClose(%v) = %v, want %v", tc.window, tc.now, got, tc.ends)
		}
		if w.String() != tc.window {
			t.Errorf("String() = %q, want %q", w.String(), tc.window)
		}
	}
}

func TestParseMaxDefer(t *testing.T) {
	if d, err := ParseMaxDefer("never"); err != nil || d != nil {
		t.Errorf(`ParseMaxDefer("never") = %v, %v; want nil, nil`, d, err)
	}
	if d, err := ParseMaxDefer("90m"); err != nil || d == nil || *d != 90*time.Minute {
		t.Errorf(`ParseMaxDefer("90m") = %v, %v; want 1h30m0s`, d, err)
	}
	for _, in := range []string{"", "-1m", "forever", "10"} {
		if _, err := ParseMaxDefer(in); err == nil || !strings.Contains(err.Error(), `"`+in+`"`) {
			t.Errorf("ParseMaxDefer(%q): error %v, want one that quotes the value", in, err)
		}
	}
}

// AfterOpen counts only the time the window is open, in real time: across a
// change of the clocks an opening lasts the hours that pass, not those the
// clocks show.
func TestWindowAfterOpen(t *testing.T) {
	berlin, newYork, sydney := mustZone(t, "Europe/Berlin"), mustZone(t, "America/New_York"), mustZone(t, "Australia/Sydney")
	at := func(loc *time.Location, s string) time.Time { return wallTime(t, loc, s) }
	utc := func(s string) time.Time { return at(time.UTC, s) }
	tests := []struct {
		name   string
		window string
		from   time.Time
		open   time.Duration
		want   time.Time
	}{
		// 2026-11-29 is a Sunday: an edit then waits for Monday's window,
		// and its hour is all that day gives.
		{"Sunday edit, Monday window", "Mon 03:00-04:00", utc("2026-11-29 15:00"), 90 * time.Minute, utc("2026-12-07 03:30")},
		{"spent as the window closes", "Mon 03:00-04:00", utc("2026-11-29 15:00"), 2 * time.Hour, utc("2026-12-07 04:00")},
		{"from within an opening", "Mon 03:00-04:00", utc("2026-11-30 03:20"), time.Hour, utc("2026-12-07 03:20")},
		{"overnight", "Sat 22:00-04:00", utc("2026-12-06 01:00"), 4 * time.Hour, utc("2026-12-12 23:00")},
		{"nothing to wait for", "Mon 03:00-04:00", utc("2026-11-29 15:00"), 0, utc("2026-11-29 15:00")},
		// Berlin, spring (2027-03-28, 02:00 becomes 03:00): 01:00-06:00
		// is five hours that night too, to 07:00.
		{"Berlin spring", "01:00-06:00 Europe/Berlin", at(berlin, "2027-03-27 12:00"), 4*time.Hour + 30*time.Minute, at(berlin, "2027-03-28 06:30")},
		{"Berlin spring, in the hour skipped", "02:00-02:30 Europe/Berlin", at(berlin, "2027-03-27 12:00"), 40 * time.Minute, at(berlin, "2027-03-29 02:10")},
		// Berlin, autumn (2026-10-25, 03:00 becomes 02:00): five hours,
		// to 05:00 on the clocks.
		{"Berlin autumn", "01:00-06:00 Europe/Berlin", at(berlin, "2026-10-24 12:00"), 4*time.Hour + 30*time.Minute, at(berlin, "2026-10-25 04:30")},
		{"Berlin autumn, into the next night", "01:00-06:00 Europe/Berlin", at(berlin, "2026-10-24 12:00"), 5*time.Hour + 30*time.Minute, at(berlin, "2026-10-26 01:30")},
		// New York, spring (2027-03-14, 02:00 becomes 03:00): three hours,
		// to 05:00 on the clocks.
		{"New York spring", "Sun 01:00-04:00 America/New_York", at(newYork, "2027-03-13 12:00"), 2*time.Hour + 30*time.Minute, at(newYork, "2027-03-14 04:30")},
		// New York, autumn (2026-11-01, 02:00 becomes 01:00): two and a
		// half hours, to 02:00 EST; two of them end at the second 01:30.
		{"New York autumn", "Sun 00:30-03:00 America/New_York", at(newYork, "2026-10-31 12:00"), 2 * time.Hour, utc("2026-11-01 06:30")},
		// Sydney, autumn (2027-04-04, 03:00 becomes 02:00), across a
		// midnight window: six hours, to 04:00 on the clocks.
		{"Sydney autumn", "Sat 23:00-05:00 Australia/Sydney", at(sydney, "2027-04-03 12:00"), 5*time.Hour + 30*time.Minute, utc("2027-04-03 17:30")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, err := ParseWindow(tc.window)
			if err != nil {
				t.Fatal(err)
			}
			got := w.AfterOpen(tc.from, tc.open)
			if !got.Equal(tc.want) {
				t.Errorf("%q.AfterOpen(%v, %v) = %v, want %v", tc.window, tc.from, tc.open, got, tc.want.UTC())
			}
			if open := w.OpenDuration(tc.from, tc.want); open != tc.open {
				t.Errorf("%q.OpenDuration(%v, %v) = %v, want %v", tc.window, tc.from, tc.want, open, tc.open)
			}
		})
	}
}

// A max-defer that the window gives only after its horizon waits for ever.
func TestWindowAfterOpenBeyondTheHorizon(t *testing.T) {
	w, err := ParseWindow("Mon 03:00-04:00")
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)
	// Ten years of Mondays give some 522 hours.
	if got := w.AfterOpen(from, 500*time.Hour); got.IsZero() || got.Sub(from) < 9*365*24*time.Hour {
		t.Errorf("AfterOpen(500h) = %v, want some nine and a half years on", got)
	}
	// Found walking the horizon, or known without.
	for _, d := range []time.Duration{600 * time.Hour, 20000 * time.Hour} {
		if got := w.AfterOpen(from, d); !got.IsZero() {
			t.Errorf("AfterOpen(%v) = %v, want the zero time", d, got)
		}
	}
}

// AfterOpen and OpenDuration agree with Open, NextOpen and NextClose, and
// now and then with Open checked minute by minute, for random windows and
// times around changes of the clocks.
func TestWindowOpenTimeProperties(t *testing.T) {
	windows := []string{
		"Mon 03:00-04:00", "Sat 22:00-04:00", "00:00-24:00", "Mon-Fri 02:00-06:00 Europe/Berlin",
		"01:00-06:00 Europe/Berlin", "02:00-02:30 Europe/Berlin", "02:30-02:00 Europe/Berlin",
		"Sun 00:30-03:00 America/New_York", "Sat,Sun 01:30-01:15 America/New_York", "Sat 23:00-05:00 Australia/Sydney",
		"00:00-24:00 America/New_York", "Sat 23:30-23:15 America/New_York", "Sun 02:00-03:00 America/New_York",
		"Sun 02:00-03:00 Australia/Sydney", "01:45-02:15 Australia/Lord_Howe",
	}
	// Days around changes of the clocks in Berlin, New York, Sydney and
	// Lord Howe Island.
	changes := []time.Time{
		time.Date(2026, 10, 24, 0, 0, 0, 0, time.UTC), time.Date(2026, 10, 31, 0, 0, 0, 0, time.UTC),
		time.Date(2027, 3, 13, 0, 0, 0, 0, time.UTC), time.Date(2027, 3, 27, 0, 0, 0, 0, time.UTC),
		time.Date(2027, 4, 3, 0, 0, 0, 0, time.UTC), time.Date(2027, 10, 2, 0, 0, 0, 0, time.UTC),
		time.Date(2027, 10, 30, 0, 0, 0, 0, time.UTC), time.Date(2027, 11, 6, 0, 0, 0, 0, time.UTC),
	}
	for seed := range uint64(500) {
		rng := rand.New(rand.NewPCG(seed, 0x51ed))
		spec := windows[rng.IntN(len(windows))]
		w, err := ParseWindow(spec)
		if err != nil {
			t.Fatal(err)
		}
		from := changes[rng.IntN(len(changes))].Add(time.Duration(rng.IntN(3*24*60*60)) * time.Second)
		d := time.Duration(rng.IntN(4*60*60)+1) * time.Second
		end := w.AfterOpen(from, d)
		if open := openSince(w, from, end); open != d {
			t.Fatalf("seed %d: %q: AfterOpen(%v, %v) = %v, after %v of open window", seed, spec, from, d, end, open)
		}
		if open := openSince(w, from, end.Add(-time.Second)); open >= d {
			t.Fatalf("seed %d: %q: AfterOpen(%v, %v) = %v, but the window was open %v a second before",
				seed, spec, from, d, end, open)
		}
		to := from.Add(time.Duration(rng.IntN(3*24*60*60)) * time.Second)
		if got, want := w.OpenDuration(from, to), openSince(w, from, to); got != want {
			t.Fatalf("seed %d: %q: OpenDuration(%v, %v) = %v, want %v", seed, spec, from, to, got, want)
		}
		if seed%10 == 0 {
			if got, want := openSince(w, from, to), openMinutes(w, from, to); got != want {
				t.Fatalf("seed %d: %q: from %v to %v, open %v by its openings, %v minute by minute", seed, spec, from, to, got, want)
			}
		}
	}
}

// instant parses "2006-01-02 15:04 -0700": the offset says which of two
// instants a time the clocks show twice is.
func instant(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse("2006-01-02 15:04 -0700", s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// On the days the clocks change, an opening starts when the clocks first
// show its start, or jump past it, and lasts the window's length: it neither
// vanishes nor grows nor shrinks. All the changes are on Sundays, so each
// window opens once that week.
func TestWindowAcrossChangesOfTheClocks(t *testing.T) {
	tests := []struct {
		name, window  string
		lasts         time.Duration
		opens, closes string   // "2006-01-02 15:04 -0700"
		closed        []string // instants in the opening's hours on the clocks, shown again after it closed
	}{
		// New York, spring: 2027-03-14 02:00 EST becomes 03:00 EDT.
		{"New York spring, the hour skipped", "Sun 02:00-03:00 America/New_York", time.Hour,
			"2027-03-14 03:00 -0400", "2027-03-14 04:00 -0400", nil},
		{"New York spring, within the hour skipped", "Sun 02:15-02:45 America/New_York", 30 * time.Minute,
			"2027-03-14 03:00 -0400", "2027-03-14 03:30 -0400", nil},
		{"New York spring, into the hour skipped", "Sun 01:30-02:30 America/New_York", time.Hour,
			"2027-03-14 01:30 -0500", "2027-03-14 03:30 -0400", nil},
		{"New York spring, across it", "Sun 01:00-04:00 America/New_York", 3 * time.Hour,
			"2027-03-14 01:00 -0500", "2027-03-14 05:00 -0400", nil},
		{"New York spring, from the hour skipped", "Sun 02:30-05:00 America/New_York", 150 * time.Minute,
			"2027-03-14 03:00 -0400", "2027-03-14 05:30 -0400", nil},
		{"New York spring, across midnight", "Sat 23:00-03:00 America/New_York", 4 * time.Hour,
			"2027-03-13 23:00 -0500", "2027-03-14 04:00 -0400", nil},
		// New York, autumn: 2027-11-07 02:00 EDT becomes 01:00 EST.
		{"New York autumn, the hour repeated", "Sun 01:00-02:00 America/New_York", time.Hour,
			"2027-11-07 01:00 -0400", "2027-11-07 01:00 -0500", []string{"2027-11-07 01:30 -0500", "2027-11-07 01:59 -0500"}},
		{"New York autumn, within the hour repeated", "Sun 01:15-01:45 America/New_York", 30 * time.Minute,
			"2027-11-07 01:15 -0400", "2027-11-07 01:45 -0400", []string{"2027-11-07 01:15 -0500", "2027-11-07 01:30 -0500"}},
		{"New York autumn, into the hour repeated", "Sun 00:30-01:30 America/New_York", time.Hour,
			"2027-11-07 00:30 -0400", "2027-11-07 01:30 -0400", []string{"2027-11-07 01:10 -0500"}},
		{"New York autumn, across it", "Sun 00:00-03:00 America/New_York", 3 * time.Hour,
			"2027-11-07 00:00 -0400", "2027-11-07 02:00 -0500", []string{"2027-11-07 02:30 -0500"}},
		{"New York autumn, across midnight", "Sat 22:00-04:00 America/New_York", 6 * time.Hour,
			"2027-11-06 22:00 -0400", "2027-11-07 03:00 -0500", []string{"2027-11-07 03:30 -0500"}},
		// Berlin, spring: 2027-03-28 02:00 CET becomes 03:00 CEST.
		{"Berlin spring, within the hour skipped", "Sun 02:00-02:30 Europe/Berlin", 30 * time.Minute,
			"2027-03-28 03:00 +0200", "2027-03-28 03:30 +0200", nil},
		{"Berlin spring, across it", "Sun 01:00-06:00 Europe/Berlin", 5 * time.Hour,
			"2027-03-28 01:00 +0100", "2027-03-28 07:00 +0200", nil},
		{"Berlin spring, across midnight", "Sat 23:30-02:30 Europe/Berlin", 3 * time.Hour,
			"2027-03-27 23:30 +0100", "2027-03-28 03:30 +0200", nil},
		// Berlin, autumn: 2027-10-31 03:00 CEST becomes 02:00 CET.
		{"Berlin autumn, the hour repeated", "Sun 02:00-03:00 Europe/Berlin", time.Hour,
			"2027-10-31 02:00 +0200", "2027-10-31 02:00 +0100", []string{"2027-10-31 02:30 +0100"}},
		{"Berlin autumn, into the hour repeated", "Sun 01:00-02:30 Europe/Berlin", 90 * time.Minute,
			"2027-10-31 01:00 +0200", "2027-10-31 02:30 +0200", []string{"2027-10-31 02:15 +0100"}},
		{"Berlin autumn, across midnight", "Sat 21:00-03:00 Europe/Berlin", 6 * time.Hour,
			"2027-10-30 21:00 +0200", "2027-10-31 02:00 +0100", []string{"2027-10-31 02:30 +0100"}},
		// Sydney, autumn: 2027-04-04 03:00 AEDT becomes 02:00 AEST. Here
		// time.Date takes a time shown twice for the second one.
		{"Sydney autumn, the hour repeated", "Sun 02:00-03:00 Australia/Sydney", time.Hour,
			"2027-04-04 02:00 +1100", "2027-04-04 02:00 +1000", []string{"2027-04-04 02:30 +1000"}},
		{"Sydney autumn, within the hour repeated", "Sun 02:30-02:45 Australia/Sydney", 15 * time.Minute,
			"2027-04-04 02:30 +1100", "2027-04-04 02:45 +1100", []string{"2027-04-04 02:35 +1000"}},
		{"Sydney autumn, across midnight", "Sat 23:00-05:00 Australia/Sydney", 6 * time.Hour,
			"2027-04-03 23:00 +1100", "2027-04-04 04:00 +1000", []string{"2027-04-04 04:30 +1000"}},
		// Sydney, spring: 2027-10-03 02:00 AEST becomes 03:00 AEDT.
		{"Sydney spring, the hour skipped", "Sun 02:00-03:00 Australia/Sydney", time.Hour,
			"2027-10-03 03:00 +1100", "2027-10-03 04:00 +1100", nil},
		{"Sydney spring, into the hour skipped", "Sun 01:30-02:30 Australia/Sydney", time.Hour,
			"2027-10-03 01:30 +1000", "2027-10-03 03:30 +1100", nil},
		{"Sydney spring, across midnight", "Sat 22:00-02:30 Australia/Sydney", 270 * time.Minute,
			"2027-10-02 22:00 +1000", "2027-10-03 03:30 +1100", nil},
		// Lord Howe Island moves its clocks by half an hour: 2027-10-03
		// 02:00 becomes 02:30, 2027-04-04 02:00 becomes 01:30.
		{"Lord Howe spring, within the half hour skipped", "Sun 02:00-02:20 Australia/Lord_Howe", 20 * time.Minute,
			"2027-10-03 02:30 +1100", "2027-10-03 02:50 +1100", nil},
		{"Lord Howe autumn, the half hour repeated", "Sun 01:30-02:00 Australia/Lord_Howe", 30 * time.Minute,
			"2027-04-04 01:30 +1100", "2027-04-04 01:30 +1030", []string{"2027-04-04 01:45 +1030"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, err := ParseWindow(tc.window)
			if err != nil {
				t.Fatal(err)
			}
			opens, closes := instant(t, tc.opens), instant(t, tc.closes)
			if closes.Sub(opens) != tc.lasts {
				t.Fatalf("the case is wrong: %v to %v is not %v", opens, closes, tc.lasts)
			}
			half := opens.Add(tc.lasts / 2)
			for _, p := range []struct {
				at   time.Time
				open bool
			}{
				{opens.Add(-time.Second), false}, {opens, true}, {half, true},
				{closes.Add(-time.Second), true}, {closes, false},
			} {
				if got := w.Open(p.at); got != p.open {
					t.Errorf("Open(%v) = %v, want %v", p.at, got, p.open)
				}
			}
			for _, s := range tc.closed {
				if at := instant(t, s); w.Open(at) {
					t.Errorf("Open(%v) = true, want false: the opening closed at %v", at, closes)
				}
			}
			for _, from := range []time.Time{opens.Add(-12 * time.Hour), opens.Add(-time.Second)} {
				if got := w.NextOpen(from); !got.Equal(opens) {
					t.Errorf("NextOpen(%v) = %v, want %v", from, got, opens)
				}
			}
			if got := w.NextOpen(half); !got.Equal(half) {
				t.Errorf("NextOpen(%v) = %v, want it, open", half, got)
			}
			for _, at := range []time.Time{opens, half, closes.Add(-time.Second)} {
				if got := w.NextClose(at); !got.Equal(closes) {
					t.Errorf("NextClose(%v) = %v, want %v", at, got, closes)
				}
			}
			if got := w.NextClose(closes); !got.IsZero() {
				t.Errorf("NextClose(%v) = %v, want the zero time", closes, got)
			}
			if got := w.OpenDuration(opens.Add(-24*time.Hour), closes.Add(24*time.Hour)); got != tc.lasts {
				t.Errorf("OpenDuration over the days around it = %v, want %v", got, tc.lasts)
			}
			if got := w.OpenDuration(opens.Add(-time.Hour), half); got != tc.lasts/2 {
				t.Errorf("OpenDuration(%v, %v) = %v, want %v", opens.Add(-time.Hour), half, got, tc.lasts/2)
			}
			for _, c := range []struct {
				from  time.Time
				open  time.Duration
				after time.Time
			}{
				{opens.Add(-12 * time.Hour), tc.lasts, closes},
				{opens.Add(-12 * time.Hour), tc.lasts / 2, half},
				{half, tc.lasts / 2, closes},
			} {
				if got := w.AfterOpen(c.from, c.open); !got.Equal(c.after) {
					t.Errorf("AfterOpen(%v, %v) = %v, want %v", c.from, c.open, got, c.after)
				}
			}
		})
	}
}

// A whole day, 00:00-24:00, is the whole day however long the change of
// the clocks makes it: open for the 25 hours of the day the clocks go back,
// the 23 of the day they go forward. A window of nearly a day lasts its
// written length in real time: the day the clocks go forward it runs into
// the next day, across the start of the next opening if there is one.
func TestLongWindowAcrossChangesOfTheClocks(t *testing.T) {
	tests := []struct {
		name, window string
		at           string // "2006-01-02 15:04 -0700"
		open         bool
		closes       string // NextClose, "" when closed
		nextOpen     string // NextOpen when closed
	}{
		// New York, autumn: 2027-11-07 02:00 EDT becomes 01:00 EST; the day
		// is 25 hours long, and so is the opening.
		{"whole day, autumn", "00:00-24:00 America/New_York", "2027-11-07 12:00 -0500", true, "2027-11-08 00:00 -0500", ""},
		{"whole day, autumn, the last hour", "00:00-24:00 America/New_York", "2027-11-07 23:30 -0500", true, "2027-11-08 00:00 -0500", ""},
		// New York, spring: 2027-03-14 is 23 hours long, and so is the
		// opening; Monday's follows it.
		{"whole day, spring", "00:00-24:00 America/New_York", "2027-03-14 12:00 -0400", true, "2027-03-15 00:00 -0400", ""},
		{"whole day, spring, the day after", "00:00-24:00 America/New_York", "2027-03-15 00:30 -0400", true, "2027-03-16 00:00 -0400", ""},
		{"Sunday only, spring", "Sun 00:00-24:00 America/New_York", "2027-03-15 00:30 -0400", false, "", "2027-03-21 00:00 -0400"},
		// Saturday's opening of nearly a day, across Sunday's change, ends
		// on Monday: two days after it started.
		{"nearly a day, into a third day", "Sat 23:30-23:15 America/New_York", "2027-03-15 00:05 -0400", true, "2027-03-15 00:15 -0400", ""},
		{"nearly a day, closed after", "Sat 23:30-23:15 America/New_York", "2027-03-15 00:15 -0400", false, "", "2027-03-20 23:30 -0400"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, err := ParseWindow(tc.window)
			if err != nil {
				t.Fatal(err)
			}
			at := instant(t, tc.at)
			if got := w.Open(at); got != tc.open {
				t.Errorf("Open(%v) = %v, want %v", at, got, tc.open)
			}
			var closes, nextOpen time.Time
			if tc.open {
				closes, nextOpen = instant(t, tc.closes), at
			} else {
				nextOpen = instant(t, tc.nextOpen)
			}
			if got := w.NextClose(at); !got.Equal(closes) {
				t.Errorf("NextClose(%v) = %v, want %v", at, got, closes)
			}
			if got := w.NextOpen(at); !got.Equal(nextOpen) {
				t.Errorf("NextOpen(%v) = %v, want %v", at, got, nextOpen)
			}
			if got, want := w.OpenDuration(at, closes), closes.Sub(at); tc.open && got != want {
				t.Errorf("OpenDuration(%v, %v) = %v, want %v", at, closes, got, want)
			}
		})
	}
}

// changesOfTheClocks returns the instants the clocks of loc change from
// from to to.
func changesOfTheClocks(loc *time.Location, from, to time.Time) []time.Time {
	var changes []time.Time
	for t := from; ; {
		_, next := t.In(loc).ZoneBounds()
		if next.IsZero() || !next.Before(to) {
			return changes
		}
		changes = append(changes, next)
		t = next
	}
}

// clockOf is what the clocks of loc show at t, written as if in UTC, so
// that two of them compare as the clocks do.
func clockOf(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// For random windows that open once a week, on the day of a change of the
// clocks or the day before, at times around it: the opening starts when the
// clocks first show its start, or jump past it, and lasts the window's
// length; any day-long span that holds it is open that long; Open, openTimes
// and AfterOpen agree.
func TestWindowOpeningsLastTheirLength(t *testing.T) {
	zones := []string{"America/New_York", "Europe/Berlin", "Australia/Sydney", "Australia/Lord_Howe"}
	changes := make(map[string][]time.Time)
	for _, zone := range zones {
		changes[zone] = changesOfTheClocks(mustZone(t, zone), time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC))
		if len(changes[zone]) != 3 {
			t.Fatalf("%s changes its clocks at %v, want three times from June 2026 to 2027", zone, changes[zone])
		}
	}
	dayNames := []string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}
	for seed := range uint64(2000) {
		rng := rand.New(rand.NewPCG(seed, 0xd57))
		zone := zones[rng.IntN(len(zones))]
		loc := mustZone(t, zone)
		change := changes[zone][rng.IntN(len(changes[zone]))]
		// The day of the change or the one before, and a start within
		// three hours of the clocks at the change, mostly in a quarter
		// hour, so that it falls in the time skipped or repeated.
		shown := clockOf(change, loc)
		day := time.Date(shown.Year(), shown.Month(), shown.Day()-rng.IntN(2), 0, 0, 0, 0, time.UTC)
		around := shown.Hour()*60 + shown.Minute() - 3*60 + rng.IntN(6*60)
		if rng.IntN(4) > 0 {
			around -= around % 15
		}
		start := (around + 24*60) % (24 * 60)
		length := 1 + rng.IntN(3*60)
		if rng.IntN(3) == 0 {
			// Short of a whole day, which lasts its day instead
			// (TestLongWindowAcrossChangesOfTheClocks).
			length = 1 + rng.IntN(24*60-1)
		}
		end := fmt.Sprintf("%02d:%02d", (start+length)/60%24, (start+length)%60)
		spec := fmt.Sprintf("%s %02d:%02d-%s %s", dayNames[day.Weekday()], start/60, start%60, end, zone)
		w, err := ParseWindow(spec)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d: %q around the change at %v: %s", seed, spec, change.In(loc), fmt.Sprintf(format, args...))
		}
		lasts := time.Duration(length) * time.Minute
		// Two days before the day, at a time before it in any zone; the
		// week's opening before has closed.
		before := day.AddDate(0, 0, -2).Add(-14 * time.Hour)
		if w.Open(before) {
			fail("open at %v", before)
		}
		opens := w.NextOpen(before)
		closes := w.NextClose(opens)
		if got := closes.Sub(opens); got != lasts {
			fail("opens at %v, closes at %v: open %v, want %v", opens, closes, got, lasts)
		}
		want := day.Add(time.Duration(start) * time.Minute)
		if got := clockOf(opens, loc); !got.Equal(want) && !(clockOf(opens.Add(-time.Nanosecond), loc).Before(want) && got.After(want)) {
			fail("opens at %v, neither at %v on the clocks nor as they jump past it", opens.In(loc), want.Format("2006-01-02 15:04"))
		}
		for at := opens.Add(-3 * time.Hour); at.Before(opens); at = at.Add(time.Minute) {
			if !clockOf(at, loc).Before(want) {
				fail("opens at %v, but the clocks showed %v already at %v", opens.In(loc), want.Format("15:04"), at.In(loc))
			}
		}
		// Any day-long span that holds the opening.
		from := closes.Add(-24 * time.Hour).Add(time.Duration(rng.Int64N(int64(24*time.Hour-lasts) + 1)))
		if got := w.OpenDuration(from, from.Add(24*time.Hour)); got != lasts {
			fail("open %v from %v for a day, want %v", got, from, lasts)
		}
		var times [][2]time.Time
		for start, end := range w.openTimes(before, 5) {
			times = append(times, [2]time.Time{start, end})
		}
		if len(times) != 1 || !times[0][0].Equal(opens) || !times[0][1].Equal(closes) {
			fail("openTimes(%v, 5) = %v, want only [%v, %v)", before, times, opens, closes)
		}
		for range 20 {
			at := opens.Add(-6*time.Hour + time.Duration(rng.Int64N(int64(lasts+12*time.Hour))))
			if got, want := w.Open(at), !at.Before(opens) && at.Before(closes); got != want {
				fail("Open(%v) = %v, want %v", at.In(loc), got, want)
			}
		}
		d := time.Duration(1 + rng.Int64N(int64(lasts)))
		if got := w.AfterOpen(before, d); !got.Equal(opens.Add(d)) {
			fail("AfterOpen(%v, %v) = %v, want %v", before, d, got, opens.Add(d))
		}
	}
}

// For random windows on random days, from instants around changes of the
// clocks, openTimes yields ordered intervals that do not overlap, and Open
// is true at exactly their instants.
func TestWindowOpenAgreesWithOpenTimes(t *testing.T) {
	zones := []string{"America/New_York", "Europe/Berlin", "Australia/Sydney", "Australia/Lord_Howe"}
	dayNames := []string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}
	for seed := range uint64(1000) {
		rng := rand.New(rand.NewPCG(seed, 0x0be4))
		zone := zones[rng.IntN(len(zones))]
		loc := mustZone(t, zone)
		changes := changesOfTheClocks(loc, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC))
		change := changes[rng.IntN(len(changes))]
		var days []string
		for _, name := range dayNames {
			if rng.IntN(2) == 0 {
				days = append(days, name)
			}
		}
		if len(days) == 0 {
			days = dayNames
		}
		start, length := rng.IntN(24*4)*15, 15+rng.IntN(24*4)*15
		end := fmt.Sprintf("%02d:%02d", (start+length)/60%24, (start+length)%60)
		if length >= 24*60 {
			start, end = 0, "24:00"
		}
		spec := fmt.Sprintf("%s %02d:%02d-%s %s", strings.Join(days, ","), start/60, start%60, end, zone)
		w, err := ParseWindow(spec)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		from := change.Add(-36*time.Hour + time.Duration(rng.Int64N(int64(72*time.Hour))))
		var times [][2]time.Time
		for start, end := range w.openTimes(from, 3) {
			if start.Before(from) || !end.After(start) || len(times) > 0 && start.Before(times[len(times)-1][1]) {
				t.Fatalf("seed %d: %q: openTimes(%v) yields [%v, %v) after %v", seed, spec, from, start, end, times)
			}
			times = append(times, [2]time.Time{start, end})
		}
		// openTimes yields the openings that start in the three days
		// after from's: all of those of the next two days.
		for range 50 {
			at := from.Add(time.Duration(rng.Int64N(int64(48 * time.Hour))))
			want := false
			for _, o := range times {
				want = want || !at.Before(o[0]) && at.Before(o[1])
			}
			if got := w.Open(at); got != want {
				t.Fatalf("seed %d: %q: Open(%v) = %v, but openTimes(%v) yields %v", seed, spec, at.In(loc), got, from, times)
			}
		}
	}
}
