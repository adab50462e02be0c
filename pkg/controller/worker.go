package controller

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/example/gamesession-controller/pkg/metrics"
)

// maxRetries is how often a key is retried before it is dropped from its
// queue. With the default per-item backoff of 5ms*2^n, 15 retries span 5ms,
// 10ms, ... 82s, about 2.7 minutes in all. A dropped key is picked up again by
// its object's next event, its resync, or (a profile) its next periodic plan.
const maxRetries = 15

// worker runs the syncs of one queue: the GameSession queue and the profile
// queue have one each, so both get the same metrics, retries and logging.
type worker struct {
	// kind names the queue's objects in log lines ("gameSession", "profile").
	kind string
	// queueLabel is the queue label of the controller's metrics.
	queueLabel string
	queue      workqueue.TypedRateLimitingInterface[string]
	sync       func(ctx context.Context, key string) error
	metrics    *metrics.ControllerMetrics
}

func (w worker) run(ctx context.Context) {
	for w.processNext(ctx) {
	}
}

// processNext syncs the next key of the queue and reports false once the
// queue is shut down.
func (w worker) processNext(ctx context.Context) bool {
	key, shutdown := w.queue.Get()
	if shutdown {
		return false
	}
	// Done tells the queue the key may be handed out again; until then a
	// re-add is parked, so two workers never sync the same key at once.
	defer w.queue.Done(key)

	start := time.Now()
	err := w.sync(ctx, key)
	w.metrics.ObserveSync(w.queueLabel, syncResult(err), time.Since(start))
	w.handleErr(ctx, err, key)
	return true
}

// handleErr decides what becomes of a key after its sync: forgotten on
// success, retried with backoff on failure (quietly for a conflict, which
// is normal), and dropped after maxRetries failures in a row.
func (w worker) handleErr(ctx context.Context, err error, key string) {
	if err == nil {
		w.queue.Forget(key)
		return
	}
	logger := klog.FromContext(ctx)
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	ref := klog.KRef(ns, name)
	switch {
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		// Its namespace is being deleted, and it with it: nothing to retry.
		logger.V(2).Info("Namespace is terminating; forgetting the key", w.kind, ref)
		w.queue.Forget(key)
		return
	case isConflict(err):
		// Our cached copy was stale; the watch event with the fresh one is
		// on its way. Normal under load, so retry quietly.
		logger.V(4).Info("Conflict syncing, retrying", w.kind, ref, "err", err)
		w.queue.AddRateLimited(key)
		return
	case w.queue.NumRequeues(key) < maxRetries:
		logger.V(2).Info("Error syncing, retrying", w.kind, ref, "err", err)
		w.queue.AddRateLimited(key)
		return
	}
	utilruntime.HandleErrorWithContext(ctx, err, "Dropping key out of the queue after repeated failures", w.kind, ref, "retries", maxRetries)
	w.metrics.ObserveDropped(w.queueLabel)
	w.queue.Forget(key)
}

// isConflict reports whether err, or every error joined in it, is a
// conflict.
func isConflict(err error) bool {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		for _, e := range joined.Unwrap() {
			if !isConflict(e) {
				return false
			}
		}
		return len(joined.Unwrap()) > 0
	}
	return apierrors.IsConflict(err)
}

func syncResult(err error) string {
	switch {
	case err == nil:
		return metrics.SyncSuccess
	case isConflict(err):
		return metrics.SyncConflict
	default:
		return metrics.SyncError
	}
}
