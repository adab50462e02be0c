package tenancy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// createSessionReading creates a session whose game server reads the Secrets
// named, each through its own source of one projected volume.
func (e *env) createSessionReading(namespace, name, profileRef string, secrets ...string) {
	e.t.Helper()
	var sources []corev1.VolumeProjection
	for _, secret := range secrets {
		sources = append(sources, corev1.VolumeProjection{Secret: &corev1.SecretProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret},
			Items:                []corev1.KeyToPath{{Key: "token", Path: secret}}}})
	}
	e.createSessionWith(namespace, name, profileRef, &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "game-server",
			VolumeMounts: []corev1.VolumeMount{{Name: "credentials", MountPath: "/var/run/credentials"}}}},
		Volumes: []corev1.Volume{{Name: "credentials", VolumeSource: corev1.VolumeSource{
			Projected: &corev1.ProjectedVolumeSource{Sources: sources}}}},
	}})
}

// putSecret creates or updates a Secret with one key, "token".
func (e *env) putSecret(namespace, name string, labelled bool, token []byte) {
	e.t.Helper()
	client := e.kube.CoreV1().Secrets(namespace)
	secret, err := client.Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	}
	if labelled {
		secret.Labels = map[string]string{gamesv1.SecretLabel: gamesv1.SecretLabelValue}
	}
	secret.Data = map[string][]byte{"token": token}
	if secret.ResourceVersion == "" {
		_, err = client.Create(e.ctx, secret, metav1.CreateOptions{})
	} else {
		_, err = client.Update(e.ctx, secret, metav1.UpdateOptions{})
	}
	if err != nil {
		e.t.Fatalf("write Secret %s/%s: %v", namespace, name, err)
	}
}

// secretsHash returns the Secret digest the session's Deployment runs with,
// and the Secrets it names.
func (e *env) secretsHash(namespace, name string) (names, hash string, err error) {
	d, err := e.kube.AppsV1().Deployments(namespace).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", "", err
	}
	a := d.Spec.Template.Annotations
	return a[gamesv1.SecretsAnnotation], a[gamesv1.SecretsHashAnnotation], nil
}

// TestSecretRotationRollsExactlyItsSessions runs the controller cluster-wide
// as the artifacts' roles, over two tenants whose Secrets share a name: a
// rotation rolls the sessions that read that Secret, in that namespace, and
// no other; an unlabelled Secret rolls nothing; a restarted controller reads
// the same digest key and rolls nothing.
func TestSecretRotationRollsExactlyItsSessions(t *testing.T) {
	e := newEnv(t)
	blue, green := e.namespace(), e.namespace()
	run := rand.String(8)
	tokenFirst, tokenSecond := "first-token-"+run, "second-token-"+run
	for _, ns := range []string{blue, green} {
		e.createProfile(ns, "arena", map[string]string{"server.cfg": "max_players=16"})
		e.putSecret(ns, "match-token", true, []byte(tokenFirst))
		e.putSecret(ns, "unlabelled", false, []byte(tokenFirst))
		e.createSessionReading(ns, "reader-1", "arena", "match-token")
		e.createSessionReading(ns, "reader-2", "arena", "match-token", "unlabelled")
		e.createSessionReading(ns, "bystander", "arena", "unlabelled")
		e.createSession(ns, "plain", "arena")
	}
	cfg := e.controllerIdentity()
	rc := e.startController(cfg)

	type key struct{ ns, name string }
	all := []key{{blue, "reader-1"}, {blue, "reader-2"}, {blue, "bystander"}, {blue, "plain"},
		{green, "reader-1"}, {green, "reader-2"}, {green, "bystander"}, {green, "plain"}}
	hashes := map[key]string{}
	generations := func() map[key]int64 {
		out := map[key]int64{}
		for _, k := range all {
			d, err := e.kube.AppsV1().Deployments(k.ns).Get(e.ctx, k.name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			out[k] = d.Generation
		}
		return out
	}
	e.eventually("every session's Deployment, with the labelled Secret's digest where it reads one", func() (bool, error) {
		for _, k := range all {
			names, hash, err := e.secretsHash(k.ns, k.name)
			if err != nil {
				return false, err
			}
			wantNames := map[string]string{"reader-1": "match-token", "reader-2": "match-token"}[k.name]
			if names != wantNames || (wantNames != "") != (hash != "") {
				return false, fmt.Errorf("%s/%s runs Secrets %q (digest %q), want %q", k.ns, k.name, names, hash, wantNames)
			}
			hashes[k] = hash
		}
		return true, nil
	})
	if hashes[key{blue, "reader-1"}] == hashes[key{green, "reader-1"}] {
		t.Errorf("the same data in two namespaces' Secrets gave one digest: the digest is not bound to the Secret")
	}
	before := generations()

	// A rotation in blue: blue's two readers roll, and nothing else.
	e.putSecret(blue, "match-token", true, []byte(tokenSecond))
	readersRolled := func(ns string) func() (bool, error) {
		return func() (bool, error) {
			for _, name := range []string{"reader-1", "reader-2"} {
				_, hash, err := e.secretsHash(ns, name)
				if err != nil || hash == hashes[key{ns, name}] {
					return false, fmt.Errorf("%s/%s still runs digest %q (%v)", ns, name, hash, err)
				}
			}
			return true, nil
		}
	}
	e.eventually("blue's readers rolled", readersRolled(blue))
	// The unlabelled Secret changes too; it rolls nothing. Then a rotation
	// in green, whose event comes after both: once green's readers rolled,
	// whatever the earlier events did is done.
	e.putSecret(blue, "unlabelled", false, []byte(tokenSecond))
	e.putSecret(green, "match-token", true, []byte(tokenSecond))
	e.eventually("green's readers rolled", readersRolled(green))
	// Nothing the controller wrote holds a Secret's data: not the Events,
	// not the sessions' status, not the Deployments.
	for _, ns := range []string{blue, green} {
		events, err := e.kube.CoreV1().Events(ns).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sessions, err := e.game.GamesV1().GameSessions(ns).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		deployments, err := e.kube.AppsV1().Deployments(ns).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		written, err := json.Marshal([]any{events, sessions, deployments})
		if err != nil {
			t.Fatal(err)
		}
		for _, token := range []string{tokenFirst, tokenSecond} {
			if bytes.Contains(written, []byte(token)) {
				t.Errorf("what the controller wrote in %s holds Secret data %q", ns, token)
			}
		}
	}
	after := generations()
	for _, k := range all {
		if moved := after[k] != before[k]; moved != (k.name == "reader-1" || k.name == "reader-2") {
			t.Errorf("%s/%s: generation %d -> %d", k.ns, k.name, before[k], after[k])
		}
		if n := after[k] - before[k]; n > 1 {
			t.Errorf("%s/%s rolled %d times for one rotation", k.ns, k.name, n)
		}
	}
	for request, n := range rc.refused() {
		// Namespaces of earlier tests may still be terminating, and
		// refuse new content; this test's own must refuse nothing.
		if strings.Contains(request, "/namespaces/"+blue+"/") || strings.Contains(request, "/namespaces/"+green+"/") ||
			!strings.Contains(request, "/namespaces/") {
			t.Errorf("the artifacts' roles refused %s %d times", request, n)
		}
	}

	// A restart reads the same key from its Secret: the digests stay, and
	// nothing rolls.
	rc.cancel()
	if err := <-rc.done; err != nil {
		t.Fatalf("controller: %v", err)
	}
	rc.done <- nil // for the cleanup
	e.startController(cfg)
	// One more rotation, in green, proves the restarted controller works.
	e.putSecret(green, "match-token", true, []byte("third"))
	e.eventually("green's readers rolled by the restarted controller", func() (bool, error) {
		for _, name := range []string{"reader-1", "reader-2"} {
			d, err := e.kube.AppsV1().Deployments(green).Get(e.ctx, name, metav1.GetOptions{})
			if err != nil || d.Generation != after[key{green, name}]+1 {
				return false, fmt.Errorf("%s/%s not rolled (%v)", green, name, err)
			}
		}
		return true, nil
	})
	// A session created now is queued behind the restart's first pass over
	// every session: once its Deployment exists, that pass is done.
	e.createSession(green, "late", "arena")
	e.eventually("the late session's Deployment", func() (bool, error) {
		_, err := e.kube.AppsV1().Deployments(green).Get(e.ctx, "late", metav1.GetOptions{})
		return err == nil, err
	})
	for _, k := range all {
		d, err := e.kube.AppsV1().Deployments(k.ns).Get(e.ctx, k.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := after[k]
		if k.ns == green && k.name != "bystander" && k.name != "plain" {
			want++
		}
		if d.Generation != want {
			t.Errorf("after the restart, %s/%s has generation %d, want %d", k.ns, k.name, d.Generation, want)
		}
	}
}

// TestControllerHeapHoldsNoSecretData: after the controller has cached and
// rolled thirty labelled Secrets of unique contents, twice, a dump of the
// process's heap (the controller runs in-process) holds none of them. A
// control value the test keeps alive on purpose is found, so the scan would
// see data the caches held.
func TestControllerHeapHoldsNoSecretData(t *testing.T) {
	e := newEnv(t)
	ns := e.namespace()
	e.createProfile(ns, "arena", map[string]string{"server.cfg": "max_players=16"})
	run := rand.String(10)
	// Only this function's local strings hold a marker, and they are gone
	// by the time of the dump.
	marker := func(round, i int) []byte {
		return []byte(fmt.Sprintf("secret-marker-%s-%d-%03d:%s", run, round, i, strings.Repeat("z", 2048)))
	}
	const secrets = 30
	var names []string
	for i := range secrets {
		name := fmt.Sprintf("token-%02d", i)
		names = append(names, name)
		e.putSecret(ns, name, true, marker(0, i))
	}
	e.createSessionReading(ns, "reader", "arena", names...)
	e.startController(e.controllerIdentity())

	var first string
	e.eventually("the reader's Deployment, with the digest of all its Secrets", func() (bool, error) {
		got, hash, err := e.secretsHash(ns, "reader")
		first = hash
		return err == nil && got == strings.Join(names, ","), fmt.Errorf("runs Secrets %q (%v)", got, err)
	})
	for i, name := range names {
		e.putSecret(ns, name, true, marker(1, i))
	}
	// Every rotation seen: the digest moved off the first, and then holds
	// still for 2s (the 30 updates may reach the controller over several
	// syncs).
	var last string
	stable := 0
	e.eventually("the digest to settle on the rotated contents", func() (bool, error) {
		_, hash, err := e.secretsHash(ns, "reader")
		if err != nil || hash == first {
			return false, fmt.Errorf("still the first digest (%v)", err)
		}
		if hash == last {
			stable++
		} else {
			last, stable = hash, 0
		}
		return stable >= 20, fmt.Errorf("digest changed %d polls ago", stable)
	})

	// What the controller read last may linger in an I/O buffer (the
	// connection's, a decoder's) until more traffic overwrites it, while
	// what a cache keeps stays. So: write filler Secrets; dump the heap;
	// scan it. A marker found is looked for again after another round of
	// filler, three rounds in all: only one found every time is kept.
	//
	// A cache of Secret data keeps all thirty current contents (as a
	// transform that keeps the data shows: every one is found, every time).
	// In about one run in four, one content, of either round, survived the
	// three rounds all the same, somewhere this test does not identify (a
	// stale slot of a goroutine's stack, which a heap dump copies whole, or
	// a buffer that large reads bypass): one is tolerated, and logged.
	control := marker(2, 0)
	kept := map[string]bool{}
	for attempt := range 3 {
		found := e.secretsInHeap(ns, attempt, func(round, i int) []byte {
			return []byte(fmt.Sprintf("secret-marker-%s-%d-%03d:", run, round, i))
		}, secrets)
		runtime.KeepAlive(control)
		if attempt == 0 {
			kept = found
		}
		for k := range kept {
			if !found[k] {
				delete(kept, k)
			}
		}
		t.Logf("heap dump %d: %d of the %d Secret contents found, %d in every dump so far", attempt+1, len(found), 2*secrets, len(kept))
		if len(kept) == 0 {
			return
		}
	}
	if len(kept) > 1 {
		t.Errorf("the heap keeps Secret data: %v", slices.Sorted(maps.Keys(kept)))
	} else {
		t.Logf("one Secret content survived three rounds of filler: %v", slices.Sorted(maps.Keys(kept)))
	}
}

// secretsInHeap overwrites the controller's I/O buffers with a filler
// Secret, dumps the heap, and returns which of the markers it holds
// ("round/i"), having checked that it finds the control marker (round 2,
// 0) the caller keeps alive: a scan that did not would find nothing else
// either.
func (e *env) secretsInHeap(ns string, attempt int, prefix func(round, i int) []byte, secrets int) map[string]bool {
	e.t.Helper()
	// Large writes overwrite a buffer whole, or bypass it (a bufio reader
	// hands a read larger than itself straight through); small ones, of
	// the markers' size, overwrite what such a buffer holds.
	filler := bytes.Repeat([]byte("f"), 512<<10)
	for i := range 3 {
		filler[0] = byte('a' + i)
		e.putSecret(ns, "filler", true, filler)
	}
	for i := range 10 {
		e.putSecret(ns, "filler-small", true, bytes.Repeat([]byte{byte('a' + i)}, 2100))
	}
	// Once a session created after the filler has its Deployment, the
	// controller has read what came before.
	name := fmt.Sprintf("after-filler-%d", attempt)
	e.createSession(ns, name, "arena")
	e.eventually("the session created after the filler", func() (bool, error) {
		_, err := e.kube.AppsV1().Deployments(ns).Get(e.ctx, name, metav1.GetOptions{})
		return err == nil, err
	})
	// Two collections: what a sync.Pool holds survives the first.
	runtime.GC()
	runtime.GC()
	path := filepath.Join(e.t.TempDir(), "heap.dump")
	f, err := os.Create(path)
	if err != nil {
		e.t.Fatal(err)
	}
	debug.WriteHeapDump(f.Fd())
	if err := f.Close(); err != nil {
		e.t.Fatal(err)
	}
	dump, err := os.ReadFile(path)
	if err != nil {
		e.t.Fatal(err)
	}
	if !bytes.Contains(dump, prefix(2, 0)) {
		e.t.Fatalf("the scan of a %d MB heap dump does not find the control value the test keeps: it would not find cached Secret data either", len(dump)>>20)
	}
	found := map[string]bool{}
	for round := range 2 {
		for i := range secrets {
			if bytes.Contains(dump, prefix(round, i)) {
				found[fmt.Sprintf("content %d of token-%02d", round, i)] = true
			}
		}
	}
	return found
}
