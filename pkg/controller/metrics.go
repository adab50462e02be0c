package controller

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/example/gamesession-controller/pkg/metrics"
)

// instrumentedSync runs syncHandler and records its result and duration in
// the controller's own metrics (defined and documented in pkg/metrics).
func (c *Controller) instrumentedSync(ctx context.Context, key string) error {
	start := time.Now()
	err := c.syncHandler(ctx, key)
	c.metrics.ObserveSync(syncResult(err), time.Since(start))
	return err
}

func syncResult(err error) string {
	switch {
	case err == nil:
		return metrics.SyncSuccess
	case apierrors.IsConflict(err):
		return metrics.SyncConflict
	default:
		return metrics.SyncError
	}
}
