package rollout

import (
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
		// the window is an hour shorter that day.
		{"01:00-06:00 Europe/Berlin", at(berlin, "2027-03-28 01:30"), true, at(berlin, "2027-03-28 01:30"), at(berlin, "2027-03-28 06:00")},
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
		// is four hours that night, five the next.
		{"Berlin spring", "01:00-06:00 Europe/Berlin", at(berlin, "2027-03-27 12:00"), 4*time.Hour + 30*time.Minute, at(berlin, "2027-03-29 01:30")},
		{"Berlin spring, in the hour skipped", "02:00-02:30 Europe/Berlin", at(berlin, "2027-03-27 12:00"), 40 * time.Minute, at(berlin, "2027-03-29 02:10")},
		// Berlin, autumn (2026-10-25, 03:00 becomes 02:00): six hours.
		{"Berlin autumn", "01:00-06:00 Europe/Berlin", at(berlin, "2026-10-24 12:00"), 5*time.Hour + 30*time.Minute, at(berlin, "2026-10-25 05:30")},
		// New York, spring (2027-03-14, 02:00 becomes 03:00): two hours.
		{"New York spring", "Sun 01:00-04:00 America/New_York", at(newYork, "2027-03-13 12:00"), 2*time.Hour + 30*time.Minute, at(newYork, "2027-03-21 01:30")},
		// New York, autumn (2026-11-01, 02:00 becomes 01:00): three and a
		// half hours.
		{"New York autumn", "Sun 00:30-03:00 America/New_York", at(newYork, "2026-10-31 12:00"), 3*time.Hour + 15*time.Minute, utc("2026-11-01 07:45")},
		// Sydney, autumn (2027-04-04, 03:00 becomes 02:00), across a
		// midnight window.
		{"Sydney autumn", "Sat 23:00-05:00 Australia/Sydney", at(sydney, "2027-04-03 12:00"), 6*time.Hour + 30*time.Minute, at(sydney, "2027-04-04 04:30")},
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
	}
	// Days around changes of the clocks in Berlin, New York and Sydney.
	changes := []time.Time{
		time.Date(2026, 10, 24, 0, 0, 0, 0, time.UTC), time.Date(2026, 10, 31, 0, 0, 0, 0, time.UTC),
		time.Date(2027, 3, 13, 0, 0, 0, 0, time.UTC), time.Date(2027, 3, 27, 0, 0, 0, 0, time.UTC),
		time.Date(2027, 4, 3, 0, 0, 0, 0, time.UTC),
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
