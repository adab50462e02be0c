package controller

import (
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	core "k8s.io/client-go/testing"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// The controller's side of the API server: reactors, prepended on both fake
// clientsets, answer every request from the world's apiServer, so the fakes'
// own object trackers are never used. A request the controller has no
// business making is answered with an error and recorded as a violation.

// fault is an answer armed by the world for the controller's next request of
// one kind.
type fault struct {
	request string // "create", "patch", "updateStatus" or "delete"
	kind    faultKind
}

type faultKind int

const (
	// faultServerError answers 500 without applying the request.
	faultServerError faultKind = iota
	// faultConflict answers 409 without applying the request.
	faultConflict
	// faultLostResponse applies the request, then answers 500, as when a
	// response times out: the controller cannot tell it from faultServerError.
	faultLostResponse
	// faultForbidden answers 403 (a quota, an admission webhook, RBAC) and
	// faultInvalid 422 (a validating webhook), without applying the request.
	faultForbidden
	faultInvalid
)

func (k faultKind) String() string {
	return [...]string{"500", "409 Conflict", "500 after applying", "403 Forbidden", "422 Invalid"}[k]
}

func (w *world) installReactors() {
	w.kubeClient.PrependReactor("*", "*", w.serveKube)
	w.gameClient.PrependReactor("*", "*", w.serveGames)
}

func (w *world) serveKube(action core.Action) (bool, runtime.Object, error) {
	w.countRequest(action)
	if action.GetSubresource() != "" {
		return w.unexpected(action)
	}
	switch action.GetResource().Resource {
	case "deployments":
		switch action.GetVerb() {
		case "create":
			return w.createDeployment(action.(core.CreateAction))
		case "get":
			return w.getDeployment(action.(core.GetAction))
		case "patch":
			return w.patchDeployment(action.(core.PatchAction))
		case "update":
			return w.updateDeployment(action.(core.UpdateAction))
		}
	case "configmaps":
		// Revisions: the profile sync creates and deletes them, reads one
		// only right after its create answered AlreadyExists, and never
		// updates or patches a ConfigMap. Live profiles: the session sync
		// creates and replaces them, and reads the revision whose content
		// it delivers when that is not the profile's current one
		// (world_live_test.go).
		switch action.GetVerb() {
		case "create":
			if cm, ok := action.(core.CreateAction).GetObject().(*corev1.ConfigMap); ok && cm.Labels[worldLiveProfileLabel] == "true" {
				return w.createLiveProfile(action.(core.CreateAction))
			}
			return w.createRevision(action.(core.CreateAction))
		case "update":
			return w.updateLiveProfile(action.(core.UpdateAction))
		case "delete":
			return w.deleteRevision(action.(core.DeleteAction))
		case "get":
			return w.getConfigMap(action.(core.GetAction))
		}
	}
	return w.unexpected(action)
}

func (w *world) serveGames(action core.Action) (bool, runtime.Object, error) {
	w.countRequest(action)
	switch r, verb, sub := action.GetResource().Resource, action.GetVerb(), action.GetSubresource(); {
	case r == "gamesessions" && verb == "update" && sub == "status":
		return w.updateSessionStatus(action.(core.UpdateAction))
	case r == "profilerollouts" && verb == "create" && sub == "":
		return w.createRollout(action.(core.CreateAction))
	case r == "profilerollouts" && verb == "update" && sub == "status":
		return w.updateRolloutStatus(action.(core.UpdateAction))
	}
	return w.unexpected(action)
}

// createRollout and updateRolloutStatus serve the profile sync's writes of
// a profile's ProfileRollout, its record of the rollout.
func (w *world) createRollout(a core.CreateAction) (bool, runtime.Object, error) {
	r := a.GetObject().(*gamesv1.ProfileRollout)
	w.checkRolloutCreate(r)
	f, faulty := w.takeFault("create")
	if faulty && f != faultLostResponse {
		w.logf("  → CREATE profilerollout %s: injected %s", r.Name, f)
		return true, nil, injectedError(f, rolloutsResource, r.Name)
	}
	created, err := w.server.create(byController, rolloutsResource, r)
	if err != nil {
		w.logf("  → CREATE profilerollout %s: %v", r.Name, err)
		return true, nil, err
	}
	w.logf("  → CREATE profilerollout %s: %s, rv %s", r.Name, created.GetUID(), created.GetResourceVersion())
	if faulty {
		w.logf("    (answered: injected %s)", f)
		return true, nil, injectedError(f, rolloutsResource, r.Name)
	}
	return true, created, nil
}

func (w *world) updateRolloutStatus(a core.UpdateAction) (bool, runtime.Object, error) {
	r := a.GetObject().(*gamesv1.ProfileRollout)
	f, faulty := w.takeFault("updateStatus")
	if faulty && f != faultLostResponse {
		w.logf("  → UPDATE profilerollout %s/status: injected %s", r.Name, f)
		return true, nil, injectedError(f, rolloutsResource, r.Name)
	}
	updated, err := w.server.updateStatus(byController, rolloutsResource, r, true)
	if err != nil {
		w.logf("  → UPDATE profilerollout %s/status (rv %s): %v", r.Name, r.ResourceVersion, err)
		return true, nil, err
	}
	w.noteRolloutWritten(updated.(*gamesv1.ProfileRollout))
	st := updated.(*gamesv1.ProfileRollout).Status
	w.logf("  → UPDATE profilerollout %s/status (rv %s): rv %s phase %s target %s stable %s halted %q moved %d/%d",
		r.Name, r.ResourceVersion, updated.GetResourceVersion(), st.Phase, st.TargetHash, st.StableHash, st.HaltedHash,
		st.MovedSessions, st.TotalSessions)
	if st.Inputs != nil {
		// Moves for new data of inputs, and the canaries of rotations.
		w.logf("    inputs %+v", *st.Inputs)
	}
	if faulty {
		w.logf("    (answered: injected %s)", f)
		return true, nil, injectedError(f, rolloutsResource, r.Name)
	}
	return true, updated, nil
}

// checkRolloutCreate checks a ProfileRollout the controller creates: named
// like a profile its cache shows, and owned by that profile.
func (w *world) checkRolloutCreate(r *gamesv1.ProfileRollout) {
	profile := w.caches[profilesResource].profile(r.Name)
	switch {
	case profile == nil:
		w.violate("rollout-without-profile", "ProfileRollout %s created for a profile the controller's cache does not show", r.Name)
	case len(r.OwnerReferences) != 1 || r.OwnerReferences[0].UID != profile.UID || r.OwnerReferences[0].Kind != "ConfigMap":
		w.violate("rollout-owner", "ProfileRollout %s created with owner references %+v, want its profile %s", r.Name, r.OwnerReferences, profile.UID)
	}
}

func (w *world) createDeployment(a core.CreateAction) (bool, runtime.Object, error) {
	d := a.GetObject().(*appsv1.Deployment)
	w.checkControllerCreate(d)
	w.controllerTried[d.Name] = true
	f, faulty := w.takeFault("create")
	if faulty && f != faultLostResponse {
		w.logf("  → CREATE deployment %s: injected %s", d.Name, f)
		return true, nil, injectedError(f, deploymentsResource, d.Name)
	}
	// A Create acts on whether the name is free now: a live read of sorts.
	w.noteLiveRead(d.Name)
	created, err := w.server.create(byController, deploymentsResource, d)
	w.lastCreate = lastCreate{name: d.Name, alreadyExists: apierrors.IsAlreadyExists(err)}
	if err != nil {
		w.logf("  → CREATE deployment %s: %v", d.Name, err)
		return true, nil, err
	}
	w.logf("  → CREATE deployment %s: %s, rv %s", d.Name, created.GetUID(), created.GetResourceVersion())
	w.noteControllerWrite(nil, created.(*appsv1.Deployment))
	if faulty {
		w.logf("    (answered: injected %s)", f)
		return true, nil, injectedError(f, deploymentsResource, d.Name)
	}
	return true, created, nil
}

func (w *world) getDeployment(a core.GetAction) (bool, runtime.Object, error) {
	if live, cached := w.server.deployment(a.GetName()), w.caches[deploymentsResource].deployment(a.GetName()); w.writeUnanswered[a.GetName()] &&
		live != nil && cached != nil && live.ResourceVersion != cached.ResourceVersion {
		w.awaitsCache[a.GetName()] = live.ResourceVersion
	}
	w.checkControllerGet(a.GetName())
	w.noteLiveRead(a.GetName())
	d := w.server.deployment(a.GetName())
	if d == nil {
		w.logf("  → GET deployment %s: not found", a.GetName())
		return true, nil, apierrors.NewNotFound(deploymentsResource.groupResource(), a.GetName())
	}
	w.logf("  → GET deployment %s: rv %s", a.GetName(), d.ResourceVersion)
	return true, d, nil
}

func (w *world) patchDeployment(a core.PatchAction) (bool, runtime.Object, error) {
	name := a.GetName()
	w.controllerTried[name] = true
	if pt := a.GetPatchType(); pt != types.MergePatchType && pt != types.StrategicMergePatchType && pt != types.JSONPatchType {
		return w.unexpected(a)
	}
	patch := string(a.GetPatch())
	if len(patch) > 240 {
		patch = patch[:240] + "..."
	}
	f, faulty := w.takeFault("patch")
	w.writeUnanswered[name] = faulty && (f == faultServerError || f == faultLostResponse)
	if faulty && f != faultLostResponse {
		w.logf("  → PATCH deployment %s %s: injected %s", name, patch, f)
		return true, nil, injectedError(f, deploymentsResource, name)
	}
	before := w.server.deployment(name)
	patched, err := w.server.patch(byController, deploymentsResource, name, a.GetPatchType(), a.GetPatch())
	if err != nil {
		w.logf("  → PATCH deployment %s %s: %v", name, patch, err)
		return true, nil, err
	}
	after := patched.(*appsv1.Deployment)
	if after.ResourceVersion == before.ResourceVersion {
		w.logf("  → PATCH deployment %s %s: no change", name, patch)
	} else {
		w.logf("  → PATCH deployment %s %s: rv %s→%s", name, patch, before.ResourceVersion, after.ResourceVersion)
		w.noteControllerWrite(before, after)
	}
	if faulty {
		w.logf("    (answered: injected %s)", f)
		return true, nil, injectedError(f, deploymentsResource, name)
	}
	return true, after, nil
}

// updateDeployment serves the controller's update of a Deployment (its
// write unless Options.PatchDeployments), with its resourceVersion as the
// precondition, as the API server checks it.
func (w *world) updateDeployment(a core.UpdateAction) (bool, runtime.Object, error) {
	d := a.GetObject().(*appsv1.Deployment)
	name := d.Name
	w.controllerTried[name] = true
	f, faulty := w.takeFault("patch")
	w.writeUnanswered[name] = faulty && (f == faultServerError || f == faultLostResponse)
	if faulty && f != faultLostResponse {
		w.logf("  → UPDATE deployment %s (rv %s): injected %s", name, d.ResourceVersion, f)
		return true, nil, injectedError(f, deploymentsResource, name)
	}
	before := w.server.deployment(name)
	updated, err := w.server.update(byController, deploymentsResource, d, true)
	if err != nil {
		w.logf("  → UPDATE deployment %s (rv %s): %v", name, d.ResourceVersion, err)
		return true, nil, err
	}
	after := updated.(*appsv1.Deployment)
	if after.ResourceVersion == before.ResourceVersion {
		w.logf("  → UPDATE deployment %s (rv %s): no change", name, d.ResourceVersion)
	} else {
		w.logf("  → UPDATE deployment %s (rv %s): rv %s→%s, profile %s", name, d.ResourceVersion, before.ResourceVersion,
			after.ResourceVersion, after.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation])
		w.noteControllerWrite(before, after)
	}
	if faulty {
		w.logf("    (answered: injected %s)", f)
		return true, nil, injectedError(f, deploymentsResource, name)
	}
	return true, after, nil
}

func (w *world) updateSessionStatus(a core.UpdateAction) (bool, runtime.Object, error) {
	s := a.GetObject().(*gamesv1.GameSession)
	f, faulty := w.takeFault("updateStatus")
	if faulty && f != faultLostResponse {
		w.logf("  → UPDATE gamesession %s/status: injected %s", s.Name, f)
		return true, nil, injectedError(f, sessionsResource, s.Name)
	}
	updated, err := w.server.updateStatus(byController, sessionsResource, s, true)
	if err != nil {
		w.logf("  → UPDATE gamesession %s/status (rv %s): %v", s.Name, s.ResourceVersion, err)
		return true, nil, err
	}
	w.logf("  → UPDATE gamesession %s/status (rv %s): rv %s%s", s.Name, s.ResourceVersion, updated.GetResourceVersion(),
		describeStatus(&updated.(*gamesv1.GameSession).Status))
	if w.live.on {
		w.checkLiveStatusClaim(updated.(*gamesv1.GameSession))
	}
	if s.Namespace+"/"+s.Name == w.syncKey {
		w.syncWroteStatus = true
	}
	if faulty {
		w.logf("    (answered: injected %s)", f)
		return true, nil, injectedError(f, sessionsResource, s.Name)
	}
	return true, updated, nil
}

func (w *world) unexpected(a core.Action) (bool, runtime.Object, error) {
	detail := ""
	if p, ok := a.(core.PatchAction); ok {
		detail = " of type " + string(p.GetPatchType())
	}
	w.violate("unexpected-request", "the controller made a request it has no business making: %s %s/%s%s",
		a.GetVerb(), a.GetResource().Resource, a.GetSubresource(), detail)
	return true, nil, fmt.Errorf("harness: unexpected request %s %s", a.GetVerb(), a.GetResource().Resource)
}

// countRequest counts the controller's requests by the name of their object,
// which is the session's name for all of them.
func (w *world) countRequest(action core.Action) {
	name := ""
	switch a := action.(type) {
	case core.CreateAction:
		name = a.GetObject().(metav1.Object).GetName()
	case interface{ GetName() string }:
		name = a.GetName()
	}
	w.requestsBy[name]++
}

// takeFault disarms and returns the fault armed for a request, if any.
func (w *world) takeFault(request string) (faultKind, bool) {
	for i, f := range w.faults {
		if f.request == request {
			w.faults = append(w.faults[:i], w.faults[i+1:]...)
			return f.kind, true
		}
	}
	return 0, false
}

func injectedError(kind faultKind, r apiResource, name string) error {
	switch kind {
	case faultConflict:
		return apierrors.NewConflict(r.groupResource(), name, errors.New("injected conflict"))
	case faultForbidden:
		return apierrors.NewForbidden(r.groupResource(), name, errors.New("exceeded quota: configmaps, requested: count/configmaps=1"))
	case faultInvalid:
		return apierrors.NewInvalid(r.groupKind(), name, field.ErrorList{
			field.Forbidden(field.NewPath("metadata", "labels"), "denied by the label-policy webhook")})
	}
	return apierrors.NewInternalError(errors.New("injected server error"))
}

// lastCreate is the controller's last Create: a Get is legitimate only right
// after one that was answered AlreadyExists.
type lastCreate struct {
	name          string
	alreadyExists bool
}
