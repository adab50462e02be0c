package rollout

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestParseIntOrPercent(t *testing.T) {
	good := []struct {
		in   string
		want intstr.IntOrString
	}{
		{"0", intstr.FromInt32(0)},
		{"1", intstr.FromInt32(1)},
		{"10", intstr.FromInt32(10)},
		{"007", intstr.FromInt32(7)},
		{"2147483647", intstr.FromInt32(2147483647)},
		{"0%", intstr.FromString("0%")},
		{"10%", intstr.FromString("10%")},
		{"010%", intstr.FromString("10%")},
		{"100%", intstr.FromString("100%")},
		{"150%", intstr.FromString("150%")},
	}
	for _, tc := range good {
		got, err := ParseIntOrPercent(tc.in)
		if err != nil {
			t.Errorf("ParseIntOrPercent(%q): unexpected error %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("ParseIntOrPercent(%q) = %#v, want %#v", tc.in, got, tc.want)
		}
	}

	bad := []string{
		"", "%", "%%", "10%%", "%10", "-1", "-1%", "+1", "1.5", "1.5%", " 10", "10 ", "10 %",
		"abc", "ten%", "0x10", "1e3", "2147483648", "99999999999%",
	}
	for _, in := range bad {
		_, err := ParseIntOrPercent(in)
		if err == nil {
			t.Errorf("ParseIntOrPercent(%q): no error", in)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, `"`+in+`"`) || !strings.Contains(msg, "want") {
			t.Errorf("ParseIntOrPercent(%q): error %q should quote the value and say what is expected", in, msg)
		}
	}
}

func TestPolicyFor(t *testing.T) {
	defaults := Policy{
		MaxRolling: intstr.FromString("25%"),
		Canary:     intstr.FromInt32(2),
		MaxFailed:  new(intstr.FromInt32(3)),
	}
	pausedDefaults := defaults
	pausedDefaults.Paused = true

	tests := []struct {
		name        string
		annotations map[string]string
		want        Policy
		// wantErr lists substrings of the error; empty means no error.
		wantErr []string
	}{
		{
			name: "nil annotations keep the defaults",
			want: defaults,
		},
		{
			name:        "unrelated annotations keep the defaults",
			annotations: map[string]string{"example.com/other": "x"},
			want:        defaults,
		},
		{
			name: "all valid",
			annotations: map[string]string{
				AnnotationMaxRolling: "10",
				AnnotationCanary:     "5%",
				AnnotationMaxFailed:  "10%",
				AnnotationPaused:     "true",
			},
			want: Policy{
				MaxRolling: intstr.FromInt32(10),
				Canary:     intstr.FromString("5%"),
				MaxFailed:  new(intstr.FromString("10%")),
				Paused:     true,
			},
		},
		{
			name:        "max-defer sets how long busy sessions wait",
			annotations: map[string]string{AnnotationMaxDefer: "45m"},
			want:        Policy{MaxRolling: defaults.MaxRolling, Canary: defaults.Canary, MaxFailed: defaults.MaxFailed, MaxDefer: new(45 * time.Minute)},
		},
		{
			name:        "max-defer never waits until idle",
			annotations: map[string]string{AnnotationMaxDefer: "never"},
			want:        defaults,
		},
		{
			name:        "bad max-defer pauses",
			annotations: map[string]string{AnnotationMaxDefer: "1 hour"},
			want:        pausedDefaults,
			wantErr:     []string{AnnotationMaxDefer, `"1 hour"`, "want"},
		},
		{
			name:        "bad window pauses",
			annotations: map[string]string{AnnotationWindow: "Mon-Fri 2am-6am"},
			want:        pausedDefaults,
			wantErr:     []string{AnnotationWindow, `"Mon-Fri 2am-6am"`, "want"},
		},
		{
			name:        "paused false runs",
			annotations: map[string]string{AnnotationPaused: "false"},
			want:        defaults,
		},
		{
			name:        "one annotation overrides only its field",
			annotations: map[string]string{AnnotationCanary: "0"},
			want:        Policy{MaxRolling: defaults.MaxRolling, Canary: intstr.FromInt32(0), MaxFailed: defaults.MaxFailed},
		},
		{
			name:        "bad max-rolling pauses",
			annotations: map[string]string{AnnotationMaxRolling: "ten"},
			want:        pausedDefaults,
			wantErr:     []string{AnnotationMaxRolling, `"ten"`, "want"},
		},
		{
			name:        "max-rolling 0 pauses",
			annotations: map[string]string{AnnotationMaxRolling: "0"},
			want:        pausedDefaults,
			wantErr:     []string{AnnotationMaxRolling, `"0"`, "more than 0"},
		},
		{
			name:        "max-rolling 0% pauses",
			annotations: map[string]string{AnnotationMaxRolling: "0%"},
			want:        pausedDefaults,
			wantErr:     []string{AnnotationMaxRolling, `"0%"`, "more than 0"},
		},
		{
			name: "bad canary pauses and discards the valid annotations",
			annotations: map[string]string{
				AnnotationMaxRolling: "50%",
				AnnotationCanary:     "-1",
			},
			want:    pausedDefaults,
			wantErr: []string{AnnotationCanary, `"-1"`, "want"},
		},
		{
			name:        "empty max-failed pauses",
			annotations: map[string]string{AnnotationMaxFailed: ""},
			want:        pausedDefaults,
			wantErr:     []string{AnnotationMaxFailed, `""`, "want"},
		},
		{
			name:        "progress deadline in minutes",
			annotations: map[string]string{AnnotationProgressDeadline: "2m"},
			want:        func() Policy { p := defaults; p.ProgressDeadlineSeconds = new(int32(120)); return p }(),
		},
		{
			name:        "progress deadline without a unit",
			annotations: map[string]string{AnnotationProgressDeadline: "90"},
			want:        pausedDefaults,
			wantErr:     []string{AnnotationProgressDeadline, `"90"`, `"90s"`},
		},
		{
			name:        "progress deadline of a fraction of a second",
			annotations: map[string]string{AnnotationProgressDeadline: "1500ms"},
			want:        pausedDefaults,
			wantErr:     []string{AnnotationProgressDeadline, "whole seconds"},
		},
		{
			name:        "progress deadline of zero",
			annotations: map[string]string{AnnotationProgressDeadline: "0s"},
			want:        pausedDefaults,
			wantErr:     []string{AnnotationProgressDeadline, `at least "1s"`},
		},
		{
			name:        "paused must be exactly true or false",
			annotations: map[string]string{AnnotationPaused: "False"},
			want:        pausedDefaults,
			wantErr:     []string{AnnotationPaused, `"False"`, `want "true" or "false"`},
		},
		{
			name: "paused false does not override a bad value",
			annotations: map[string]string{
				AnnotationPaused:    "false",
				AnnotationMaxFailed: "1.5%",
			},
			want:    pausedDefaults,
			wantErr: []string{AnnotationMaxFailed, `"1.5%"`},
		},
		{
			name:        "live delivery",
			annotations: map[string]string{AnnotationDelivery: "live"},
			want:        func() Policy { p := defaults; p.Delivery = DeliveryLive; return p }(),
		},
		{
			name:        "restart delivery, spelt out",
			annotations: map[string]string{AnnotationDelivery: "restart"},
			want:        func() Policy { p := defaults; p.Delivery = DeliveryRestart; return p }(),
		},
		{
			name:        "live delivery that defers busy sessions",
			annotations: map[string]string{AnnotationDelivery: "live", AnnotationLiveDefersBusy: "true"},
			want:        func() Policy { p := defaults; p.Delivery, p.LiveDefersBusy = DeliveryLive, true; return p }(),
		},
		{
			// A typo must not switch a profile's delivery: nothing moves,
			// and no session changes how it runs (restart is the defaults').
			name:        "unknown delivery",
			annotations: map[string]string{AnnotationDelivery: "Live"},
			want:        pausedDefaults,
			wantErr:     []string{AnnotationDelivery, `"Live"`, `"restart" or "live"`},
		},
		{
			name:        "bad live-defers-busy",
			annotations: map[string]string{AnnotationDelivery: "live", AnnotationLiveDefersBusy: "yes"},
			want:        pausedDefaults,
			wantErr:     []string{AnnotationLiveDefersBusy, `"yes"`},
		},
		{
			name: "every bad annotation is named",
			annotations: map[string]string{
				AnnotationMaxRolling: "x",
				AnnotationCanary:     "y",
				AnnotationMaxFailed:  "z",
				AnnotationPaused:     "yes",
			},
			want: pausedDefaults,
			wantErr: []string{
				AnnotationMaxRolling, `"x"`, AnnotationCanary, `"y"`,
				AnnotationMaxFailed, `"z"`, AnnotationPaused, `"yes"`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PolicyFor(tc.annotations, defaults)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("policy = %v, want %v", got, tc.want)
			}
			switch {
			case len(tc.wantErr) == 0 && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case len(tc.wantErr) > 0 && err == nil:
				t.Fatalf("no error, want one mentioning %q", tc.wantErr)
			}
			for _, part := range tc.wantErr {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error %q does not mention %q", err, part)
				}
			}
		})
	}
}

func TestUnpaced(t *testing.T) {
	tests := []struct {
		name   string
		policy Policy
		want   bool
	}{
		{"default", DefaultPolicy(), true},
		{"max-rolling above 100%", Policy{MaxRolling: intstr.FromString("150%"), Canary: intstr.FromInt32(0)}, true},
		{"canary 0%", Policy{MaxRolling: intstr.FromString("100%"), Canary: intstr.FromString("0%")}, true},
		{"zero-value canary", Policy{MaxRolling: intstr.FromString("100%")}, true},
		{"max-rolling 99%", Policy{MaxRolling: intstr.FromString("99%")}, false},
		{"max-rolling as a number", Policy{MaxRolling: intstr.FromInt32(1000000)}, false},
		{"canary 1", Policy{MaxRolling: intstr.FromString("100%"), Canary: intstr.FromInt32(1)}, false},
		{"canary 1%", Policy{MaxRolling: intstr.FromString("100%"), Canary: intstr.FromString("1%")}, false},
		{"brake", Policy{MaxRolling: intstr.FromString("100%"), MaxFailed: new(intstr.FromString("100%"))}, false},
		{"paused", Policy{MaxRolling: intstr.FromString("100%"), Paused: true}, false},
		{"malformed max-rolling", Policy{MaxRolling: intstr.FromString("100")}, false},
		{"malformed canary", Policy{MaxRolling: intstr.FromString("100%"), Canary: intstr.FromString("x")}, false},
	}
	for _, tc := range tests {
		if got := tc.policy.Unpaced(); got != tc.want {
			t.Errorf("%s: Unpaced() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPolicyString(t *testing.T) {
	tests := []struct {
		policy Policy
		want   string
	}{
		{DefaultPolicy(), "unpaced"},
		{
			Policy{MaxRolling: intstr.FromString("10%"), Canary: intstr.FromInt32(1), MaxFailed: new(intstr.FromInt32(0))},
			"max-rolling 10%, canary 1, max-failed 0",
		},
		{
			Policy{MaxRolling: intstr.FromInt32(5), Canary: intstr.FromString("5%")},
			"max-rolling 5, canary 5%",
		},
		{
			Policy{MaxRolling: intstr.FromString("100%"), Canary: intstr.FromInt32(0), Paused: true},
			"max-rolling 100%, canary 0, paused",
		},
		{
			Policy{MaxRolling: intstr.FromInt32(3), Canary: intstr.FromInt32(0), MaxFailed: new(intstr.FromString("10%")), Paused: true},
			"max-rolling 3, canary 0, max-failed 10%, paused",
		},
		{
			Policy{MaxRolling: intstr.FromString("100%"), Canary: intstr.FromInt32(0), MaxDefer: new(30 * time.Minute)},
			"unpaced, max-defer 30m0s",
		},
		{
			Policy{MaxRolling: intstr.FromString("100%"), Canary: intstr.FromInt32(0), Window: mustWindow(t, "Mon-Fri 02:00-06:00 Europe/Berlin")},
			"max-rolling 100%, canary 0, window Mon-Fri 02:00-06:00 Europe/Berlin",
		},
		{
			Policy{MaxRolling: intstr.FromString("100%"), Canary: intstr.FromInt32(0), Delivery: DeliveryRestart},
			"unpaced",
		},
		{
			Policy{MaxRolling: intstr.FromString("100%"), Canary: intstr.FromInt32(0), Delivery: DeliveryLive},
			"unpaced, delivery live",
		},
		{
			Policy{MaxRolling: intstr.FromInt32(2), Canary: intstr.FromInt32(1), Delivery: DeliveryLive, LiveDefersBusy: true},
			"max-rolling 2, canary 1, delivery live, live-defers-busy",
		},
	}
	for _, tc := range tests {
		if got := tc.policy.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

func mustWindow(t *testing.T, s string) *Window {
	t.Helper()
	w, err := ParseWindow(s)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestPolicyDefers(t *testing.T) {
	monday, err := ParseWindow("Mon 03:00-04:00")
	if err != nil {
		t.Fatal(err)
	}
	sunday := time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		maxDefer *time.Duration
		window   *Window
		started  time.Time
		now      time.Time
		waits    bool
		until    time.Time
	}{
		{"never", nil, nil, sunday, sunday.Add(1000 * time.Hour), true, time.Time{}},
		// A start recorded up to a second late must not make "0s" defer.
		{"0s from a start still to come", new(time.Duration(0)), nil, sunday.Add(time.Second), sunday, false, time.Time{}},
		{"no window", new(time.Hour), nil, sunday, sunday.Add(59 * time.Minute), true, sunday.Add(time.Hour)},
		{"no window, passed", new(time.Hour), nil, sunday, sunday.Add(time.Hour), false, sunday.Add(time.Hour)},
		{"window", new(time.Hour), monday, sunday, sunday.Add(24 * time.Hour),
			true, time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)},
		{"beyond the horizon", new(1000 * time.Hour), monday, sunday, sunday.Add(20 * 365 * 24 * time.Hour), true, time.Time{}},
	}
	for _, tc := range tests {
		p := Policy{MaxDefer: tc.maxDefer, Window: tc.window}
		waits, until := p.Defers(tc.started, tc.now)
		if waits != tc.waits || !until.Equal(tc.until) {
			t.Errorf("%s: Defers = %v, %v; want %v, %v", tc.name, waits, until, tc.waits, tc.until)
		}
	}
}
