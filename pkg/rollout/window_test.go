package rollout

import (
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

func TestWindowTimes(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := func(loc *time.Location, s string) time.Time {
		v, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
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
