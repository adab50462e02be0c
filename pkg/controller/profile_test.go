package controller

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

func profileWith(data map[string]string, binaryData map[string][]byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{Data: data, BinaryData: binaryData}
}

func TestProfileHashIgnoresInsertionOrder(t *testing.T) {
	keys := make([]string, 500)
	for i := range keys {
		keys[i] = fmt.Sprintf("level-%03d.cfg", i)
	}
	build := func(order []string) *corev1.ConfigMap {
		data, binaryData := map[string]string{}, map[string][]byte{}
		for _, k := range order {
			data[k] = "value of " + k
			binaryData[k+".bin"] = []byte(k)
		}
		return profileWith(data, binaryData)
	}
	want := ProfileHash(build(keys))
	reversed := slices.Clone(keys)
	slices.Reverse(reversed)
	orders := [][]string{reversed}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		shuffled := slices.Clone(keys)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		orders = append(orders, shuffled)
	}
	for i, order := range orders {
		if got := ProfileHash(build(order)); got != want {
			t.Fatalf("order %d: hash %s, want %s", i, got, want)
		}
	}
	// Map iteration order differs between calls too.
	p := build(keys)
	for range 50 {
		if got := ProfileHash(p); got != want {
			t.Fatalf("hash of the same map changed: %s, want %s", got, want)
		}
	}
}

func TestProfileHashDistinguishes(t *testing.T) {
	tests := []struct {
		name string
		a, b *corev1.ConfigMap
	}{
		{"a value", profileWith(map[string]string{"k": "1"}, nil), profileWith(map[string]string{"k": "2"}, nil)},
		{"a key", profileWith(map[string]string{"k": "1"}, nil), profileWith(map[string]string{"j": "1"}, nil)},
		{"a key added", profileWith(map[string]string{"k": "1"}, nil), profileWith(map[string]string{"k": "1", "l": ""}, nil)},
		{"binaryData", profileWith(map[string]string{"k": "1"}, nil), profileWith(map[string]string{"k": "1"}, map[string][]byte{"b": {0}})},
		{"binaryData value", profileWith(nil, map[string][]byte{"b": {0}}), profileWith(nil, map[string][]byte{"b": {1}})},
		{"data moved to binaryData", profileWith(map[string]string{"k": "v"}, nil), profileWith(nil, map[string][]byte{"k": []byte("v")})},
		{"key/value boundary", profileWith(map[string]string{"ab": "c"}, nil), profileWith(map[string]string{"a": "bc"}, nil)},
		{"entry boundary", profileWith(map[string]string{"a": "b", "c": "d"}, nil), profileWith(map[string]string{"a": "b\x01c\x01d"}, nil)},
		{"empty value vs none", profileWith(map[string]string{"k": ""}, nil), profileWith(nil, nil)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if ProfileHash(tc.a) == ProfileHash(tc.b) {
				t.Errorf("same hash %s for %v/%v and %v/%v", ProfileHash(tc.a), tc.a.Data, tc.a.BinaryData, tc.b.Data, tc.b.BinaryData)
			}
			if profileDataEqual(tc.a, tc.b) {
				t.Error("profileDataEqual = true")
			}
		})
	}
}

func TestProfileHashEqual(t *testing.T) {
	tests := []struct {
		name string
		a, b *corev1.ConfigMap
	}{
		{"nil and empty maps", profileWith(nil, nil), profileWith(map[string]string{}, map[string][]byte{})},
		{"nil and empty binaryData", profileWith(map[string]string{"k": "v"}, nil), profileWith(map[string]string{"k": "v"}, map[string][]byte{})},
		{
			"metadata only",
			&corev1.ConfigMap{Data: map[string]string{"k": "v"}},
			&corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: "other", Labels: map[string]string{"x": "y"}, Annotations: map[string]string{"a": "b"}, ResourceVersion: "9"},
				Data:       map[string]string{"k": "v"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if ProfileHash(tc.a) != ProfileHash(tc.b) {
				t.Errorf("hashes differ: %s, %s", ProfileHash(tc.a), ProfileHash(tc.b))
			}
			if !profileDataEqual(tc.a, tc.b) {
				t.Error("profileDataEqual = false")
			}
		})
	}
}

// The hash is in every Deployment's pod template: a controller upgrade that
// changed it would roll every game server in the cluster at once. Change the
// golden value only together with a plan for that.
func TestProfileHashIsStableAcrossReleases(t *testing.T) {
	p := profileWith(map[string]string{"game.cfg": "mode=classic\n", "motd.txt": "hello"}, map[string][]byte{"map.bin": {0, 1, 2}})
	const golden = "dfd2c227473349dc8a94"
	if got := ProfileHash(p); got != golden {
		t.Errorf("ProfileHash = %q, want %q", got, golden)
	}
}

func TestProfileHashCache(t *testing.T) {
	c := newProfileHashCache()
	p := newProfile(testNamespace, "classic", map[string]string{"k": "1"})
	if got := c.hash(p); got != ProfileHash(p) {
		t.Fatalf("hash = %s, want %s", got, ProfileHash(p))
	}
	// Same UID and resourceVersion: same object, served from the cache. (The
	// data changed only to tell a cached answer from a fresh one.)
	stale := p.DeepCopy()
	stale.Data["k"] = "2"
	if got := c.hash(stale); got != ProfileHash(p) {
		t.Errorf("same version: hash = %s, want the memoized %s", got, ProfileHash(p))
	}
	edited := withData(p, map[string]string{"k": "3"})
	if got := c.hash(edited); got != ProfileHash(edited) {
		t.Errorf("new version: hash = %s, want %s", got, ProfileHash(edited))
	}
	c.forget(p.UID)
	if len(c.entries) != 0 {
		t.Errorf("forget left %d entries", len(c.entries))
	}
}

func TestProfileRefIndexFunc(t *testing.T) {
	got, err := profileRefIndexFunc(newSession("tenant-b", "s1", "classic"))
	if err != nil || !slices.Equal(got, []string{"tenant-b/classic"}) {
		t.Errorf("got %q, %v; want [tenant-b/classic]", got, err)
	}
	if got, err := profileRefIndexFunc(&gamesv1.GameSession{}); err != nil || len(got) != 0 {
		t.Errorf("session without profileRef: got %q, %v; want no index key", got, err)
	}
	if _, err := profileRefIndexFunc(&corev1.ConfigMap{}); err == nil {
		t.Error("a ConfigMap was indexed without error")
	}
}
