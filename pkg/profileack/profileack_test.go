package profileack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

const revision = "arena-standard-5c7d9f8b"

func TestValueParseRoundTrip(t *testing.T) {
	long := strings.Repeat("x", 5000)
	// 2-byte runes, so that the cut falls inside one unless it looks.
	longAccents := strings.Repeat("é", 1000)
	cases := []struct {
		name      string
		applyErr  error
		wantValue string
		wantAck   Ack
	}{
		{"applied", nil, revision, Ack{Revision: revision}},
		{"failed", errors.New(`map pool: unknown map "dust3"`), revision + ` failed: map pool: unknown map "dust3"`,
			Ack{revision, true, `map pool: unknown map "dust3"`}},
		{"failed without a reason", errors.New(""), revision + " failed:", Ack{revision, true, ""}},
		{"a reason of whitespace only", errors.New(" \n\t "), revision + " failed:", Ack{revision, true, ""}},
		{"a reason of several lines", errors.New("  parse game.ini:\n\tline 3:\r\n  bad value\x00!  "),
			revision + " failed: parse game.ini: line 3: bad value !", Ack{revision, true, "parse game.ini: line 3: bad value !"}},
		{"a reason of invalid UTF-8", errors.New("bad \xff byte"), revision + " failed: bad \uFFFD byte",
			Ack{revision, true, "bad \uFFFD byte"}},
		{"a long reason", errors.New(long), revision + " failed: " + long[:MaxMessageBytes-len("…")] + "…",
			Ack{revision, true, long[:MaxMessageBytes-len("…")] + "…"}},
		{"a long reason of 2-byte runes", errors.New(longAccents),
			revision + " failed: " + longAccents[:MaxMessageBytes-4] + "…",
			Ack{revision, true, longAccents[:MaxMessageBytes-4] + "…"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			value := Value(revision, c.applyErr)
			if value != c.wantValue {
				t.Errorf("Value = %q, want %q", value, c.wantValue)
			}
			ack, ok := Parse(value)
			if !ok || ack != c.wantAck {
				t.Errorf("Parse(%q) = %+v, %v; want %+v, true", value, ack, ok, c.wantAck)
			}
			if len(ack.Message) > MaxMessageBytes || !utf8.ValidString(ack.Message) {
				t.Errorf("message of %d bytes, valid UTF-8 %v; want at most %d of valid UTF-8",
					len(ack.Message), utf8.ValidString(ack.Message), MaxMessageBytes)
			}
			// What Parse returns, Value writes again unchanged.
			var again error
			if ack.Failed {
				again = errors.New(ack.Message)
			}
			if got := Value(ack.Revision, again); got != value {
				t.Errorf("Value of the parsed ack = %q, want %q", got, value)
			}
		})
	}
}

func TestParse(t *testing.T) {
	cases := []struct {
		value string
		want  Ack
		ok    bool
	}{
		{"r", Ack{Revision: "r"}, true},
		{revision, Ack{Revision: revision}, true},
		{strings.Repeat("a", MaxRevisionBytes), Ack{Revision: strings.Repeat("a", MaxRevisionBytes)}, true},
		{revision + " failed:", Ack{revision, true, ""}, true},
		{revision + " failed: it broke", Ack{revision, true, "it broke"}, true},
		// Written by hand, not by Value: still one failure, made one line.
		{revision + " failed:it broke", Ack{revision, true, "it broke"}, true},
		{revision + " failed:   it\n broke  ", Ack{revision, true, "it broke"}, true},
		{revision + " failed: " + strings.Repeat("y", 3000), Ack{revision, true, strings.Repeat("y", MaxMessageBytes-len("…")) + "…"}, true},

		{"", Ack{}, false},
		{" ", Ack{}, false},
		{" " + revision, Ack{}, false},
		{revision + " ", Ack{}, false},
		{revision + " failed", Ack{}, false},
		{revision + "  failed: x", Ack{}, false},
		{revision + " Failed: x", Ack{}, false},
		{revision + " ok", Ack{}, false},
		{revision + " applied", Ack{}, false},
		{revision + "\tfailed: x", Ack{}, false},
		{revision + "\n", Ack{}, false},
		{"arena\x00", Ack{}, false},
		{"\xffarena", Ack{}, false},
		{"arena\u00a0standard", Ack{}, false},
		{strings.Repeat("a", MaxRevisionBytes+1), Ack{}, false},
		{"failed:", Ack{Revision: "failed:"}, true},
	}
	for _, c := range cases {
		got, ok := Parse(c.value)
		if ok != c.ok || got != c.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v, %v", c.value, got, ok, c.want, c.ok)
		}
	}
}

func TestReadRevision(t *testing.T) {
	cases := []struct {
		name    string
		content *string // nil: no file
		want    string
		wantErr string
	}{
		{"a name", ptr(revision), revision, ""},
		{"a name and a newline", ptr(revision + "\n"), revision, ""},
		{"a name in whitespace", ptr("  \t" + revision + " \r\n"), revision, ""},
		{"no file", nil, "", "no such file"},
		{"an empty file", ptr(""), "", "empty"},
		{"whitespace only", ptr(" \n"), "", "empty"},
		{"two words", ptr("arena standard"), "", "not a revision"},
		{"two lines", ptr("arena\nstandard\n"), "", "not a revision"},
		{"too long", ptr(strings.Repeat("a", MaxRevisionBytes+1)), "", "not a revision"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if c.content != nil {
				if err := os.WriteFile(filepath.Join(dir, RevisionFile), []byte(*c.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := ReadRevision(dir)
			if got != c.want {
				t.Errorf("ReadRevision = %q, want %q", got, c.want)
			}
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("ReadRevision: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("ReadRevision error %v, want one that says %q", err, c.wantErr)
			}
		})
	}
	t.Run("no file is fs.ErrNotExist", func(t *testing.T) {
		if _, err := ReadRevision(t.TempDir()); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("ReadRevision of an empty directory: %v, want fs.ErrNotExist", err)
		}
	})
	// The kubelet's layout of a ConfigMap volume: each file is a symlink
	// into ..data, itself a symlink to the directory of the current data,
	// swapped at once when the ConfigMap changes.
	t.Run("the kubelet's symlinks", func(t *testing.T) {
		dir := t.TempDir()
		for _, r := range []string{"arena-1", "arena-2"} {
			data := filepath.Join(dir, "..data-"+r)
			if err := os.Mkdir(data, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(data, RevisionFile), []byte(r), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("..data-arena-1", filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", RevisionFile), filepath.Join(dir, RevisionFile)); err != nil {
			t.Fatal(err)
		}
		if got, err := ReadRevision(dir); got != "arena-1" || err != nil {
			t.Fatalf("ReadRevision = %q, %v; want arena-1", got, err)
		}
		if err := os.Symlink("..data-arena-2", filepath.Join(dir, "..data-new")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data-new"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if got, err := ReadRevision(dir); got != "arena-2" || err != nil {
			t.Fatalf("after the swap ReadRevision = %q, %v; want arena-2", got, err)
		}
	})
}

func ptr(s string) *string { return &s }

func TestAcknowledge(t *testing.T) {
	const namespace, name = "arena", "arena-7d4b9-x2k8p"
	cases := []struct {
		name     string
		revision string
		applyErr error
		// The annotation's value sent, "" for no request.
		want    string
		wantErr string
	}{
		{"applied", revision, nil, revision, ""},
		{"failed", revision, errors.New("map pool:\nunknown map"), revision + " failed: map pool: unknown map", ""},
		{"an empty revision", "", nil, "", "not a valid revision"},
		{"a revision with a space", "arena standard", nil, "", "not a valid revision"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
				Labels:      map[string]string{"app": "arena"},
				Annotations: map[string]string{"example.com/kept": "yes", Annotation: "arena-old"}}}
			client := fake.NewClientset(pod)
			err := Acknowledge(t.Context(), client, namespace, name, c.revision, c.applyErr)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Errorf("Acknowledge: %v, want an error that says %q", err, c.wantErr)
				}
				if n := len(client.Actions()); n != 0 {
					t.Errorf("Acknowledge of an invalid revision sent %d requests, want none", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("Acknowledge: %v", err)
			}
			actions := client.Actions()
			if len(actions) != 1 {
				t.Fatalf("Acknowledge sent %v, want one patch", actions)
			}
			patch, ok := actions[0].(clienttesting.PatchAction)
			if !ok || patch.GetNamespace() != namespace || patch.GetName() != name || patch.GetResource().Resource != "pods" || patch.GetSubresource() != "" {
				t.Fatalf("Acknowledge sent %#v, want a patch of pod %s/%s", actions[0], namespace, name)
			}
			if patch.GetPatchType() != types.MergePatchType {
				t.Errorf("patch type %s, want %s", patch.GetPatchType(), types.MergePatchType)
			}
			var body any
			if err := json.Unmarshal(patch.GetPatch(), &body); err != nil {
				t.Fatalf("patch body %s: %v", patch.GetPatch(), err)
			}
			wantBody := map[string]any{"metadata": map[string]any{"annotations": map[string]any{Annotation: c.want}}}
			if !reflect.DeepEqual(body, wantBody) {
				t.Errorf("patch body %s, want %v", patch.GetPatch(), wantBody)
			}
			got, err := client.CoreV1().Pods(namespace).Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			wantAnnotations := map[string]string{"example.com/kept": "yes", Annotation: c.want}
			if !reflect.DeepEqual(got.Annotations, wantAnnotations) || !reflect.DeepEqual(got.Labels, pod.Labels) {
				t.Errorf("pod annotations %v, labels %v; want %v, %v", got.Annotations, got.Labels, wantAnnotations, pod.Labels)
			}
		})
	}
	t.Run("no such pod", func(t *testing.T) {
		err := Acknowledge(t.Context(), fake.NewClientset(), namespace, name, revision, nil)
		if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), namespace+"/"+name) {
			t.Errorf("Acknowledge on a missing pod: %v, want NotFound naming the pod", err)
		}
	})
}

// follower drives Follow's polls by hand, one at a time, and records what
// they applied and acknowledged.
type follower struct {
	t   *testing.T
	dir string
	rf  *revisionFollower

	applied []string // revisions given to apply, in order
	acked   []string // "revision: error" given to ack, in order
	// What apply returns for a revision, and ack for its next calls.
	applyErr map[string]error
	ackErrs  map[string][]error
}

func newFollower(t *testing.T) *follower {
	f := &follower{t: t, dir: t.TempDir(), applyErr: map[string]error{}, ackErrs: map[string][]error{}}
	apply := func(_ context.Context, revision string) error {
		f.applied = append(f.applied, revision)
		return f.applyErr[revision]
	}
	ack := func(_ context.Context, revision string, applyErr error) error {
		f.acked = append(f.acked, fmt.Sprintf("%s: %v", revision, applyErr))
		if errs := f.ackErrs[revision]; len(errs) > 0 {
			f.ackErrs[revision] = errs[1:]
			return errs[0]
		}
		return nil
	}
	_, ctx := ktesting.NewTestContext(t)
	f.rf = newRevisionFollower(ctx, f.dir, apply, ack)
	return f
}

func (f *follower) polls(n int) {
	for range n {
		f.rf.poll(f.t.Context())
	}
}

func (f *follower) write(content string) {
	f.t.Helper()
	// As the kubelet does, at once: a rename.
	tmp := filepath.Join(f.dir, "..tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(f.dir, RevisionFile)); err != nil {
		f.t.Fatal(err)
	}
}

func (f *follower) expect(step string, applied, acked []string) {
	f.t.Helper()
	if !slices.Equal(f.applied, applied) {
		f.t.Errorf("%s: applied %q, want %q", step, f.applied, applied)
	}
	if !slices.Equal(f.acked, acked) {
		f.t.Errorf("%s: acknowledged %q, want %q", step, f.acked, acked)
	}
}

func TestFollow(t *testing.T) {
	f := newFollower(t)
	// Before the kubelet has written the volume: nothing to do.
	f.polls(3)
	f.expect("no revision yet", nil, nil)

	f.write(revision + "\n")
	f.polls(5)
	f.expect("the first revision", []string{revision}, []string{revision + ": <nil>"})

	f.applyErr["arena-2"] = errors.New("unknown map")
	f.write("arena-2")
	f.polls(5)
	f.expect("a revision that fails",
		[]string{revision, "arena-2"}, []string{revision + ": <nil>", "arena-2: unknown map"})

	// An ack refused twice is retried at each poll, the revision applied once.
	f.ackErrs["arena-3"] = []error{errors.New("connection refused"), errors.New("etcdserver: timeout")}
	f.write("arena-3")
	f.polls(5)
	f.expect("an ack retried",
		[]string{revision, "arena-2", "arena-3"},
		[]string{revision + ": <nil>", "arena-2: unknown map", "arena-3: <nil>", "arena-3: <nil>", "arena-3: <nil>"})

	// A revision file gone, then back with the same revision, or invalid:
	// nothing new to apply.
	if err := os.Remove(filepath.Join(f.dir, RevisionFile)); err != nil {
		t.Fatal(err)
	}
	f.polls(2)
	f.write("arena-3")
	f.polls(2)
	f.write("arena 4")
	f.polls(2)
	f.expect("no new revision",
		[]string{revision, "arena-2", "arena-3"},
		[]string{revision + ": <nil>", "arena-2: unknown map", "arena-3: <nil>", "arena-3: <nil>", "arena-3: <nil>"})

	// Back to an earlier revision: new again, since it is not the last one.
	f.write(revision)
	f.polls(2)
	f.expect("an earlier revision again",
		[]string{revision, "arena-2", "arena-3", revision},
		[]string{revision + ": <nil>", "arena-2: unknown map", "arena-3: <nil>", "arena-3: <nil>", "arena-3: <nil>", revision + ": <nil>"})
}

func TestFollowReturnsWhenDone(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, RevisionFile), []byte(revision), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	acked := make(chan string, 1)
	returned := make(chan error, 1)
	go func() {
		returned <- Follow(ctx, dir, time.Millisecond,
			func(context.Context, string) error { return nil },
			func(_ context.Context, revision string, _ error) error {
				select {
				case acked <- revision:
				default:
				}
				return nil
			})
	}()
	select {
	case got := <-acked:
		if got != revision {
			t.Errorf("acknowledged %q, want %q", got, revision)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no acknowledgment within 10s")
	}
	cancel()
	select {
	case err := <-returned:
		if err != nil {
			t.Errorf("Follow returned %v, want nil once its context is done", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not return within 10s of its context's end")
	}

	// A context already done: Follow returns at once, without applying.
	done, cancelDone := context.WithCancel(t.Context())
	cancelDone()
	applied := false
	if err := Follow(done, dir, time.Millisecond, func(context.Context, string) error { applied = true; return nil },
		func(context.Context, string, error) error { return nil }); err != nil || applied {
		t.Errorf("Follow with a context done: %v, applied %v; want nil, false", err, applied)
	}

	noop := func(context.Context, string) error { return nil }
	noAck := func(context.Context, string, error) error { return nil }
	for name, call := range map[string]func() error{
		"a zero interval": func() error { return Follow(t.Context(), dir, 0, noop, noAck) },
		"no apply":        func() error { return Follow(t.Context(), dir, time.Second, nil, noAck) },
		"no ack":          func() error { return Follow(t.Context(), dir, time.Second, noop, nil) },
	} {
		if err := call(); err == nil {
			t.Errorf("Follow with %s: nil, want an error", name)
		}
	}
}

func TestOwnPod(t *testing.T) {
	hostname, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	namespaceFile := filepath.Join(t.TempDir(), "namespace")
	if err := os.WriteFile(namespaceFile, []byte("arena\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, podName, podNamespace, file string
		wantNamespace, wantName           string
		wantErr                           bool
	}{
		{"from the environment", "arena-x2k8p", "arena-ns", "/nonexistent", "arena-ns", "arena-x2k8p", false},
		{"the host name and the token's namespace", "", "", namespaceFile, "arena", hostname, false},
		{"no namespace anywhere", "arena-x2k8p", "", filepath.Join(t.TempDir(), "absent"), "", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(PodNameEnv, c.podName)
			t.Setenv(PodNamespaceEnv, c.podNamespace)
			old := serviceAccountNamespaceFile
			serviceAccountNamespaceFile = c.file
			t.Cleanup(func() { serviceAccountNamespaceFile = old })
			namespace, name, err := OwnPod()
			if (err != nil) != c.wantErr || namespace != c.wantNamespace || name != c.wantName {
				t.Errorf("OwnPod = %q, %q, %v; want %q, %q, error %v", namespace, name, err, c.wantNamespace, c.wantName, c.wantErr)
			}
		})
	}
}
