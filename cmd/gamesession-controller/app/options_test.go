package app

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestDefaultsAreValid(t *testing.T) {
	if err := NewOptions().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	o := NewOptions()
	o.LeaderElect = true
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults with --leader-elect: %v", err)
	}
}

func TestFlags(t *testing.T) {
	o := NewOptions()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.AddFlags(fs)

	defaults := map[string]string{
		"leader-elect":                "false",
		"leader-election-namespace":   "",
		"leader-election-id":          "gamesession-controller",
		"leader-elect-lease-duration": "15s",
		"leader-elect-renew-deadline": "10s",
		"leader-elect-retry-period":   "2s",
		"metrics-bind-address":        ":8080",
		"health-probe-bind-address":   ":8081",
		"profile-change-delay":        "500ms",
	}
	for name, want := range defaults {
		f := fs.Lookup(name)
		if f == nil {
			t.Errorf("flag --%s is missing", name)
			continue
		}
		if f.DefValue != want {
			t.Errorf("--%s defaults to %q, want %q", name, f.DefValue, want)
		}
	}

	err := fs.Parse([]string{
		"--leader-elect",
		"--leader-election-namespace=ops",
		"--leader-election-id=gs-lease",
		"--leader-elect-lease-duration=30s",
		"--leader-elect-renew-deadline=20s",
		"--leader-elect-retry-period=4s",
		"--metrics-bind-address=0",
		"--health-probe-bind-address=127.0.0.1:9000",
	})
	if err != nil {
		t.Fatal(err)
	}
	if !o.LeaderElect || o.LeaderElectionNamespace != "ops" || o.LeaderElectionID != "gs-lease" ||
		o.LeaseDuration != 30*time.Second || o.RenewDeadline != 20*time.Second || o.RetryPeriod != 4*time.Second ||
		o.MetricsBindAddress != "0" || o.HealthProbeBindAddress != "127.0.0.1:9000" {
		t.Errorf("flags not parsed into options: %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("parsed options: %v", err)
	}
}

func TestValidate(t *testing.T) {
	leaderElect := func(o *Options) { o.LeaderElect = true }
	for _, tc := range []struct {
		name    string
		change  func(*Options)
		wantErr string // empty: valid
	}{
		{"metrics disabled", func(o *Options) { o.MetricsBindAddress = "0" }, ""},
		{"health disabled", func(o *Options) { o.HealthProbeBindAddress = "0" }, ""},
		{"both disabled", func(o *Options) { o.MetricsBindAddress, o.HealthProbeBindAddress = "0", "0" }, ""},
		{"ephemeral ports may coincide", func(o *Options) { o.MetricsBindAddress, o.HealthProbeBindAddress = "127.0.0.1:0", "127.0.0.1:0" }, ""},
		{"IPv6 address", func(o *Options) { o.MetricsBindAddress = "[::1]:8080" }, ""},
		{"metrics address without port", func(o *Options) { o.MetricsBindAddress = "localhost" }, "--metrics-bind-address"},
		{"health port out of range", func(o *Options) { o.HealthProbeBindAddress = ":70000" }, "--health-probe-bind-address"},
		{"same address twice", func(o *Options) { o.HealthProbeBindAddress = o.MetricsBindAddress }, "must differ"},
		{"negative profile change delay", func(o *Options) { o.ProfileChangeDelay = -time.Second }, "--profile-change-delay"},

		// Leader election settings are checked only when it is on.
		{"bad timings without leader election", func(o *Options) { o.RenewDeadline = time.Hour }, ""},
		{"renew deadline not below lease duration", func(o *Options) { leaderElect(o); o.RenewDeadline = o.LeaseDuration }, "must be greater than --leader-elect-renew-deadline"},
		{"renew deadline within one jittered retry", func(o *Options) { leaderElect(o); o.RetryPeriod = 9 * time.Second }, "times --leader-elect-retry-period"},
		{"zero retry period", func(o *Options) { leaderElect(o); o.RetryPeriod = 0 }, "must be positive"},
		{"empty lease name", func(o *Options) { leaderElect(o); o.LeaderElectionID = "" }, "--leader-election-id"},
		{"invalid lease name", func(o *Options) { leaderElect(o); o.LeaderElectionID = "Game_Session" }, "--leader-election-id"},
		{"invalid lease namespace", func(o *Options) { leaderElect(o); o.LeaderElectionNamespace = "a.b" }, "--leader-election-namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			tc.change(o)
			err := o.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Errorf("no error, want one mentioning %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Errorf("error %q does not mention %q", err, tc.wantErr)
			}
		})
	}
}
