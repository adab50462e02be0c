package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/rollout"
)

var (
	v1Data = map[string]string{"game.yaml": "speed: 1"}
	v2Data = map[string]string{"game.yaml": "speed: 2"}
	v3Data = map[string]string{"game.yaml": "speed: 3"}
	v4Data = map[string]string{"game.yaml": "speed: 4"}
)

// historyObjects is a profile at v4 with revisions: v1 and v2 made before
// revisions were numbered (v2 first), v3 numbered 1 and v4 numbered 2, listed
// out of order, and objects that are not arena's revisions.
func historyObjects() []runtime.Object {
	return []runtime.Object{
		newProfile("arena", v4Data),
		newRevisionOf("arena", v4Data, "2", t0.Add(-time.Minute)),
		newRevisionOf("arena", v1Data, "", t0.Add(-2*time.Hour)),
		newRevisionOf("arena", v3Data, "1", t0.Add(-time.Hour)),
		newRevisionOf("arena", v2Data, "", t0.Add(-3*time.Hour)),
		newRevisionOf("classic", v1Data, "1", t0),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unrelated", Namespace: ns,
			Annotations: map[string]string{"games.example.com/revision-of": "arena"}}},
	}
}

func TestHistory(t *testing.T) {
	objs := append(historyObjects(), newRollout("arena", hashOf(v4Data), hashOf(v3Data), gamesv1.RolloutPhaseRolling, false))
	var out strings.Builder
	mustNot(t, History(context.Background(), newFakes(objs...).clients(), &out, ns, "arena", t0))
	want := []string{
		"REVISION NAME HASH CREATED AGE STATUS",
		"- arena-" + hashOf(v2Data) + " " + hashOf(v2Data) + " 2026-05-04T09:00:00Z 3h",
		"- arena-" + hashOf(v1Data) + " " + hashOf(v1Data) + " 2026-05-04T10:00:00Z 120m",
		"1 arena-" + hashOf(v3Data) + " " + hashOf(v3Data) + " 2026-05-04T11:00:00Z 60m stable",
		"2 arena-" + hashOf(v4Data) + " " + hashOf(v4Data) + " 2026-05-04T11:59:00Z 60s current",
	}
	if got := tableRows(out.String()); !reflect.DeepEqual(got, want) {
		t.Errorf("history:\n%s\nwant (spacing aside):\n%s", out.String(), strings.Join(want, "\n"))
	}
}

func TestHistoryCurrentIsStable(t *testing.T) {
	objs := append(historyObjects(), newRollout("arena", hashOf(v4Data), hashOf(v4Data), gamesv1.RolloutPhaseComplete, true))
	var out strings.Builder
	mustNot(t, History(context.Background(), newFakes(objs...).clients(), &out, ns, "arena", t0))
	lines := tableRows(out.String())
	if last := lines[len(lines)-1]; !strings.HasSuffix(last, " current,stable") {
		t.Errorf("last revision %q, want it current,stable", last)
	}
}

func TestHistoryWithoutRevisions(t *testing.T) {
	var out strings.Builder
	mustNot(t, History(context.Background(), newFakes(newProfile("arena", v1Data)).clients(), &out, ns, "arena", t0))
	if got := out.String(); got != "profile arena has no revisions yet\n" {
		t.Errorf("output %q", got)
	}
	err := History(context.Background(), newFakes().clients(), &out, ns, "arena", t0)
	if err == nil || !strings.Contains(err.Error(), "profile arena not found in namespace games") {
		t.Errorf("History of a missing profile: %v", err)
	}
}

// tableRows is each line of a table with its runs of spaces made one.
func tableRows(table string) []string {
	var lines []string
	for line := range strings.Lines(table) {
		lines = append(lines, strings.Join(strings.Fields(line), " "))
	}
	return lines
}

func TestUndo(t *testing.T) {
	for _, tc := range []struct {
		name        string
		profileData map[string]string // default v4Data
		rollout     *gamesv1.ProfileRollout
		toRevision  int
		wantData    map[string]string
		wantOut     string
		wantErr     string
	}{{
		name:     "previous of the current",
		rollout:  newRollout("arena", hashOf(v4Data), hashOf(v3Data), gamesv1.RolloutPhaseRolling, false),
		wantData: v3Data, wantOut: "profile arena rolled back to revision 1 (arena-" + hashOf(v3Data) + ")\n",
	}, {
		// The previous of the first numbered one is the newest unnumbered.
		name:     "into the unnumbered",
		rollout:  newRollout("arena", hashOf(v3Data), hashOf(v3Data), gamesv1.RolloutPhaseComplete, true),
		wantData: v1Data, wantOut: "profile arena rolled back to revision - (arena-" + hashOf(v1Data) + ")\n",
	}, {
		name:     "without a ProfileRollout the newest is current",
		wantData: v3Data,
	}, {
		// The target's revision not made yet: what comes before it is
		// the newest.
		name:        "target without a revision",
		profileData: map[string]string{"game.yaml": "speed: 5"},
		rollout:     newRollout("arena", hashOf(map[string]string{"game.yaml": "speed: 5"}), hashOf(v4Data), gamesv1.RolloutPhaseRolling, false),
		wantData:    v4Data,
	}, {
		name:       "to a revision",
		rollout:    newRollout("arena", hashOf(v4Data), hashOf(v3Data), gamesv1.RolloutPhaseRolling, false),
		toRevision: 1, wantData: v3Data,
	}, {
		name:       "to a missing revision",
		rollout:    newRollout("arena", hashOf(v4Data), hashOf(v3Data), gamesv1.RolloutPhaseRolling, false),
		toRevision: 5, wantErr: "profile arena has no revision 5",
	}, {
		name:    "no earlier revision",
		rollout: newRollout("arena", hashOf(v2Data), hashOf(v2Data), gamesv1.RolloutPhaseComplete, true),
		wantErr: "profile arena has no revision before the current one, - (arena-" + hashOf(v2Data) + ")",
	}, {
		name:       "the content already",
		rollout:    newRollout("arena", hashOf(v3Data), hashOf(v3Data), gamesv1.RolloutPhaseRolling, false),
		toRevision: 2, wantErr: "profile arena has the content of revision 2 (arena-" + hashOf(v4Data) + ") already",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			objs := historyObjects()
			if tc.profileData != nil {
				objs[0] = newProfile("arena", tc.profileData)
			}
			if tc.rollout != nil {
				objs = append(objs, tc.rollout)
			}
			f := newFakes(objs...)
			var out strings.Builder
			err := Undo(context.Background(), f.clients(), &out, ns, "arena", tc.toRevision)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Undo: %v, want an error with %q", err, tc.wantErr)
				}
				if updates := actions(f, "update"); len(updates) != 0 {
					t.Errorf("a refused undo wrote: %v", updates)
				}
				return
			}
			mustNot(t, err)
			if tc.wantOut != "" && out.String() != tc.wantOut {
				t.Errorf("output %q, want %q", out.String(), tc.wantOut)
			}
			updates := actions(f, "update")
			if len(updates) != 1 {
				t.Fatalf("updates: %v, want one", updates)
			}
			written := updates[0].(k8stesting.UpdateAction).GetObject().(*corev1.ConfigMap)
			if written.ResourceVersion != "7" {
				t.Errorf("update with resourceVersion %q, want the one read, 7", written.ResourceVersion)
			}
			want := newProfile("arena", tc.wantData)
			if !reflect.DeepEqual(written.Data, want.Data) || written.BinaryData != nil {
				t.Errorf("written data %v %v, want %v", written.Data, written.BinaryData, want.Data)
			}
			if !reflect.DeepEqual(written.Labels, want.Labels) || !reflect.DeepEqual(written.Annotations, want.Annotations) {
				t.Errorf("labels %v and annotations %v changed, want %v and %v", written.Labels, written.Annotations, want.Labels, want.Annotations)
			}
		})
	}
}

func TestUndoBinaryData(t *testing.T) {
	profile := newProfile("arena", v2Data)
	old := newRevisionOf("arena", nil, "1", t0)
	old.BinaryData = map[string][]byte{"map.bin": {0, 1, 2}}
	f := newFakes(profile, old, newRevisionOf("arena", v2Data, "2", t0))
	mustNot(t, Undo(context.Background(), f.clients(), &strings.Builder{}, ns, "arena", 0))
	got, err := f.kube.CoreV1().ConfigMaps(ns).Get(context.Background(), "arena", metav1.GetOptions{})
	mustNot(t, err)
	if len(got.Data) != 0 || !reflect.DeepEqual(got.BinaryData, old.BinaryData) {
		t.Errorf("profile data %v binaryData %v, want only the revision's binaryData", got.Data, got.BinaryData)
	}
}

func TestUndoConflict(t *testing.T) {
	f := newFakes(historyObjects()...)
	f.kube.PrependReactor("update", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "arena", errors.New("the object has been modified"))
	})
	err := Undo(context.Background(), f.clients(), &strings.Builder{}, ns, "arena", 0)
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "profile arena changed while rolling it back") {
		t.Errorf("Undo on a conflict: %v", err)
	}
}

func TestUndoRefusesARevision(t *testing.T) {
	rev := newRevisionOf("arena", v1Data, "1", t0)
	err := Undo(context.Background(), newFakes(rev).clients(), &strings.Builder{}, ns, rev.Name, 0)
	if err == nil || !strings.Contains(err.Error(), `is a revision of profile "arena", not a profile`) {
		t.Errorf("Undo of a revision: %v", err)
	}
}

// actions returns the client actions of verb on ConfigMaps.
func actions(f fakes, verb string) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range f.kube.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == "configmaps" {
			out = append(out, a)
		}
	}
	return out
}

func TestPauseResume(t *testing.T) {
	ctx := context.Background()
	f := newFakes(newProfile("arena", v1Data))
	var out strings.Builder
	mustNot(t, Pause(ctx, f.clients(), &out, ns, "arena"))
	mustNot(t, Pause(ctx, f.clients(), &out, ns, "arena"))
	cm, err := f.kube.CoreV1().ConfigMaps(ns).Get(ctx, "arena", metav1.GetOptions{})
	mustNot(t, err)
	if cm.Annotations[rollout.AnnotationPaused] != "true" || cm.Annotations["rollout.games.example.com/max-rolling"] != "2" {
		t.Errorf("annotations after pause: %v", cm.Annotations)
	}
	mustNot(t, Resume(ctx, f.clients(), &out, ns, "arena"))
	mustNot(t, Resume(ctx, f.clients(), &out, ns, "arena"))
	cm, err = f.kube.CoreV1().ConfigMaps(ns).Get(ctx, "arena", metav1.GetOptions{})
	mustNot(t, err)
	if _, ok := cm.Annotations[rollout.AnnotationPaused]; ok || cm.Annotations["rollout.games.example.com/max-rolling"] != "2" {
		t.Errorf("annotations after resume: %v", cm.Annotations)
	}
	if !reflect.DeepEqual(cm.Data, v1Data) {
		t.Errorf("data changed: %v", cm.Data)
	}
	wantOut := "profile arena paused\nprofile arena is paused already\nprofile arena resumed\nprofile arena is not paused\n"
	if out.String() != wantOut {
		t.Errorf("output %q, want %q", out.String(), wantOut)
	}

	// One merge patch each, of the annotation alone: set, then null.
	patches := actions(f, "patch")
	if len(patches) != 2 {
		t.Fatalf("patches: %v, want 2", patches)
	}
	for i, want := range []map[string]any{
		{"metadata": map[string]any{"annotations": map[string]any{rollout.AnnotationPaused: "true"}}},
		{"metadata": map[string]any{"annotations": map[string]any{rollout.AnnotationPaused: nil}}},
	} {
		p := patches[i].(k8stesting.PatchAction)
		var got map[string]any
		mustNot(t, json.Unmarshal(p.GetPatch(), &got))
		if p.GetPatchType() != types.MergePatchType || !reflect.DeepEqual(got, want) {
			t.Errorf("patch %d: %s %s, want a merge patch %v", i, p.GetPatchType(), p.GetPatch(), want)
		}
	}
}

func TestPauseMissingProfile(t *testing.T) {
	err := Pause(context.Background(), newFakes().clients(), &strings.Builder{}, ns, "arena")
	if err == nil || !strings.Contains(err.Error(), "profile arena not found in namespace games") {
		t.Errorf("Pause of a missing profile: %v", err)
	}
}
