package controller

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
)

// getConfigMap serves the profile sync's live reads of a ConfigMap: right
// after the create of a revision of that name answered AlreadyExists, to
// tell its own revision, not cached yet, from someone else's ConfigMap; and
// of a revision it needs whose delete it sent without learning the outcome;
// and the session sync's read of a revision whose content it delivers live
// (liveContentRead), and of a live profile whose create found its name
// taken, or whose write's answer did not say whether it applied.
func (w *world) getConfigMap(a core.GetAction) (bool, runtime.Object, error) {
	name := a.GetName()
	deleted, deleting := w.deletedLately[name]
	liveRead := w.live.mayRead[name]
	delete(w.live.mayRead, name)
	if liveRead {
		// What the controller learns of its live profile, it need not be
		// told by its cache again.
		w.noteLiveProfileRead(name)
	}
	if w.lastRevisionCreate != name && !deleting && !liveRead && !w.liveContentRead(name) {
		w.violate("unexpected-request", "GET of ConfigMap %s other than right after its create answered AlreadyExists, "+
			"or after a delete of it whose outcome the controller does not know: syncs read the caches", name)
	}
	w.lastRevisionCreate = ""
	for _, r := range []apiResource{revisionsResource, profilesResource, liveProfilesResource} {
		if obj := w.server.get(r, name); obj != nil {
			w.logf("  → GET configmap %s: rv %s", name, obj.GetResourceVersion())
			if deleting && obj.GetUID() == deleted {
				delete(w.deletedLately, name) // not deleted after all: the controller knows now
			}
			return true, obj, nil
		}
	}
	w.logf("  → GET configmap %s: not found", name)
	return true, nil, apierrors.NewNotFound(profilesResource.groupResource(), name)
}
