package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// syncGameSession drives one session's Deployment and status towards the
// desired state. It reads only from the informer caches and writes only what
// differs, so syncing a session that is already in order issues no request.
func (c *Controller) syncGameSession(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return fmt.Errorf("invalid queue key %q: %w", key, err)
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "gameSession", klog.KRef(namespace, name))
	ctx = klog.NewContext(ctx, logger)
	// Taken first, so that a sync ending early (a deleted session) unmarks it.
	rolling := c.rolling.take(key)

	session, err := c.sessionLister.GameSessions(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		// No finalizer: the garbage collector deletes the Deployment through
		// its ownerReference, and deleting a session never waits on us.
		logger.V(4).Info("GameSession deleted")
		c.writtenSessions.forget(key)
		c.writtenDeployments.forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	session = c.writtenSessions.latest(key, session, session.ResourceVersion)
	logger.V(4).Info("Syncing GameSession", "resourceVersion", session.ResourceVersion)

	deployment, err := c.deploymentLister.Deployments(namespace).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	cachedVersion := ""
	if apierrors.IsNotFound(err) {
		deployment = nil
	} else {
		cachedVersion = deployment.ResourceVersion
	}
	deployment = c.writtenDeployments.latest(key, deployment, cachedVersion)
	status := newSessionStatus(session)

	if deployment != nil && !metav1.IsControlledBy(deployment, session) {
		// Someone else's Deployment (or a previous session's with the same
		// name): never touch it.
		c.notControlled(session, status)
		return c.updateStatus(ctx, session, status)
	}

	profile, err := c.profileLister.ConfigMaps(namespace).Get(session.Spec.ProfileRef)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if apierrors.IsNotFound(err) {
		// Missing, deleted, or not labelled (the cache cannot tell these
		// apart, as it never holds unlabelled ConfigMaps). A running game
		// server is never torn down or changed for a bad profile: report it
		// and leave the Deployment exactly as it is.
		status.profileNotFound(c.profileSelector)
		if deployment != nil {
			status.deployment(deployment)
		} else {
			status.notReady(gamesv1.ReasonWaitingForProfile, fmt.Sprintf(MessageWaitingForProfile, session.Spec.ProfileRef))
		}
		c.warnOnTransition(session, status, gamesv1.ConditionProfileResolved)
		return c.updateStatus(ctx, session, status)
	}

	hash := c.profileHashes.hash(profile)
	if rolled := rolledProfileHash(deployment, profile.Name); rolled != "" && rolled != hash && c.fanOutPending(namespace, profile.Name) {
		// The profile changed moments ago and its fan-out waits for the
		// burst of edits to settle. A sync for another reason (a Deployment
		// status change, a resync) must not roll ahead of it, or a burst
		// would roll every busy session once per edit after all.
		hash = rolled
	}
	desired := newDeployment(session, hash)
	deploymentsClient := c.kubeClient.AppsV1().Deployments(namespace)
	wrote := false
	switch {
	case deployment == nil:
		logger.V(2).Info("Creating Deployment", "profileHash", hash)
		deployment, err = deploymentsClient.Create(ctx, desired, metav1.CreateOptions{FieldManager: Name})
		if apierrors.IsAlreadyExists(err) {
			// The Deployment exists but is not in our cache, which holds only
			// Deployments with our managed-by label: it is not ours.
			c.notControlled(session, status)
			return c.updateStatus(ctx, session, status)
		}
		if err == nil {
			wrote = true
			c.writtenDeployments.record(key, "", deployment)
			c.recorder.Eventf(session, corev1.EventTypeNormal, EventReasonCreated, MessageDeploymentCreated, desired.Name)
		}
	case deploymentNeedsUpdate(deployment, desired):
		logger.V(2).Info("Updating Deployment", "profileHash", hash)
		var patch []byte
		if patch, err = deploymentPatch(deployment, desired); err != nil {
			return err
		}
		replaced := deployment.ResourceVersion
		deployment, err = deploymentsClient.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: Name})
		if err == nil {
			// An unchanged resourceVersion means the server had it already.
			wrote = deployment.ResourceVersion != replaced
			c.writtenDeployments.record(key, replaced, deployment)
		}
	}
	if apierrors.IsInvalid(err) {
		// Retrying cannot help until the session's spec changes, which
		// enqueues it again; say why on the session instead.
		status.notReady(gamesv1.ReasonDeploymentInvalid, fmt.Sprintf(MessageDeploymentInvalid, name, err))
		c.warnOnTransition(session, status, gamesv1.ConditionReady)
		return c.updateStatus(ctx, session, status)
	}
	if err != nil {
		return err
	}
	if rolling && wrote {
		// A fan-out's first pass: the status waits at the end of the queue,
		// behind the other sessions' Deployments (see rollingSessions).
		c.queue.Add(key)
		return nil
	}

	if old := session.Status.ProfileHash; old != "" && old != hash {
		logger.V(2).Info("Rolled profile into Deployment", "profile", klog.KObj(profile), "profileHash", hash)
	}
	status.profileResolved(hash)
	status.deployment(deployment)
	if conditionChanged(session.Status.Conditions, status.status.Conditions, gamesv1.ConditionProfileResolved) &&
		meta.FindStatusCondition(session.Status.Conditions, gamesv1.ConditionProfileResolved) != nil {
		c.recorder.Eventf(session, corev1.EventTypeNormal, gamesv1.ReasonProfileResolved,
			MessageProfileResolved, session.Spec.ProfileRef, hash)
	}
	return c.updateStatus(ctx, session, status)
}

func (c *Controller) notControlled(session *gamesv1.GameSession, status *sessionStatus) {
	status.notReady(gamesv1.ReasonDeploymentNotControlled, fmt.Sprintf(MessageNotControlled, session.Name))
	c.warnOnTransition(session, status, gamesv1.ConditionReady)
}

// warnOnTransition emits the condition's message as a Warning Event when the
// condition has just changed, so a lasting problem is reported once.
func (c *Controller) warnOnTransition(session *gamesv1.GameSession, status *sessionStatus, conditionType string) {
	if !conditionChanged(session.Status.Conditions, status.status.Conditions, conditionType) {
		return
	}
	cond := meta.FindStatusCondition(status.status.Conditions, conditionType)
	c.recorder.Event(session, corev1.EventTypeWarning, cond.Reason, cond.Message)
}

// updateStatus writes the new status only if it differs from the cached one.
func (c *Controller) updateStatus(ctx context.Context, session *gamesv1.GameSession, status *sessionStatus) error {
	if equality.Semantic.DeepEqual(&session.Status, status.status) {
		return nil
	}
	updated := session.DeepCopy()
	updated.Status = *status.status
	klog.FromContext(ctx).V(4).Info("Updating GameSession status")
	written, err := c.gameClient.GamesV1().GameSessions(session.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: Name})
	if err != nil {
		return err
	}
	c.writtenSessions.record(cache.MetaObjectToName(session).String(), session.ResourceVersion, written)
	return nil
}
