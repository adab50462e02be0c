package fuzzinput

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestCRDAccepts(t *testing.T) {
	valid := Spec{Name: "arena-eu-1", ProfileRef: "arena.standard", Image: "registry.example.com/arena:1", Replicas: 2,
		Ports: "game:7777,query:7777/TCP", Requests: "cpu=500m", Limits: "cpu=1"}
	cases := []struct {
		name   string
		change func(*Spec)
		accept bool
	}{
		{"valid", func(*Spec) {}, true},
		{"63-character name", func(s *Spec) { s.Name = strings.Repeat("a", 63) }, true},
		{"64-character name", func(s *Spec) { s.Name = strings.Repeat("a", 64) }, false},
		{"upper-case name", func(s *Spec) { s.Name = "Arena" }, false},
		{"253-character profileRef", func(s *Spec) {
			s.ProfileRef = strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)
		}, true},
		{"254-character profileRef", func(s *Spec) {
			s.ProfileRef = strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 62)
		}, false},
		{"profileRef with underscore", func(s *Spec) { s.ProfileRef = "a_b" }, false},
		{"512 multi-byte characters of image", func(s *Spec) { s.Image = strings.Repeat("é", 512) }, false},
		{"image of 512 characters", func(s *Spec) { s.Image = "registry.example.com/" + strings.Repeat("a", 512-21) }, true},
		{"image of 513 characters", func(s *Spec) { s.Image = "registry.example.com/" + strings.Repeat("a", 513-21) }, false},
		{"uppercase repository", func(s *Spec) { s.Image = "registry.example.com/Arena:1.0" }, false},
		{"513 characters of image", func(s *Spec) { s.Image = strings.Repeat("i", 513) }, false},
		{"image with a tab", func(s *Spec) { s.Image = "arena\t1" }, false},
		{"image ending in a vertical tab, which RE2's \\s does not match", func(s *Spec) { s.Image = "arena\v" }, false},
		{"image not UTF-8", func(s *Spec) { s.Image = "arena\xff" }, false},
		{"replicas unset", func(s *Spec) { s.Replicas = -1 }, true},
		{"replicas 101", func(s *Spec) { s.Replicas = 101 }, false},
		{"port 0", func(s *Spec) { s.Ports = "game:0" }, false},
		{"port 65536", func(s *Spec) { s.Ports = "game:65536" }, false},
		{"protocol in lower case", func(s *Spec) { s.Ports = "game:1/udp" }, false},
		{"defaulted protocol counts in uniqueness", func(s *Spec) { s.Ports = "a:1,b:1/UDP" }, false},
		{"port name twice", func(s *Spec) { s.Ports = "a:1,a:2" }, false},
		{"16-character port name", func(s *Spec) { s.Ports = strings.Repeat("a", 16) + ":1" }, false},
		{"digits-only port name", func(s *Spec) { s.Ports = "7777:7777" }, false},
		{"9 requests", func(s *Spec) { s.Requests = "a=1,b=1,c=1,d=1,e=1,f=1,g=1,h=1,i=1" }, false},
		{"a resource other than cpu, memory and ephemeral-storage", func(s *Spec) { s.Requests = "example.com/gpu=1" }, false},
		{"a request above its limit", func(s *Spec) { s.Requests, s.Limits = "cpu=2", "cpu=1" }, false},
		{"negative request", func(s *Spec) { s.Requests = "cpu=-1" }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := valid
			tc.change(&s)
			session, err := s.Session("ns")
			if err != nil {
				t.Fatal(err)
			}
			if err := CRDAccepts(session); (err == nil) != tc.accept {
				t.Errorf("CRDAccepts = %v, want accepted %v", err, tc.accept)
			}
		})
	}
}

func TestSessionNotExpressible(t *testing.T) {
	for _, s := range []Spec{
		{Ports: "game"}, {Ports: "game:77a7"}, {Ports: "game:99999999999"},
		{Requests: "cpu"}, {Requests: "cpu=1e1.5"}, {Requests: "cpu=1,cpu=2"},
	} {
		if _, err := s.Session("ns"); err == nil {
			t.Errorf("%+v: no error", s)
		}
	}
}

// RandomSpec must produce enough sessions the CRD accepts for the dry-run test
// to sample (it draws towards the CRD's edges, so many fall just outside), with
// names at the limits among them, and some it rejects.
func TestRandomSpec(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	accepted, rejected, longNames := 0, 0, 0
	for range 2000 {
		session, err := RandomSpec(r).Session("ns")
		if err != nil {
			t.Fatalf("RandomSpec made a spec with no session: %v", err)
		}
		if CRDAccepts(session) == nil {
			accepted++
			if len(session.Name) == maxNameLength {
				longNames++
			}
		} else {
			rejected++
		}
	}
	t.Logf("accepted %d, rejected %d, %d names of %d characters", accepted, rejected, longNames, maxNameLength)
	if accepted < 800 || rejected < 100 || longNames < 100 {
		t.Errorf("accepted %d, rejected %d, %d names of %d characters: want at least 800, 100 and 100", accepted, rejected, longNames, maxNameLength)
	}
}
