package profileack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

const (
	// PodNameEnv is the environment variable [OwnPod] reads the pod's name
	// from; give it with the downward API (fieldRef metadata.name). Without
	// it, the host name is used, which is the pod's name unless the pod sets
	// spec.hostname.
	PodNameEnv = "POD_NAME"
	// PodNamespaceEnv is the environment variable [OwnPod] reads the pod's
	// namespace from (fieldRef metadata.namespace). Without it, the
	// namespace file of the mounted ServiceAccount token is read.
	PodNamespaceEnv = "POD_NAMESPACE"
)

// serviceAccountNamespaceFile is where the kubelet mounts the namespace of
// the pod's ServiceAccount token, which is the pod's own; a variable for the
// tests.
var serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// ApplyFunc applies the profile files of revision, which [Follow] has just
// read in the profile directory, to the running game server.
type ApplyFunc func(ctx context.Context, revision string) error

// AckFunc acknowledges that revision was applied (applyErr nil) or not.
type AckFunc func(ctx context.Context, revision string, applyErr error) error

// Follow watches the profile directory dir until ctx is done. It reads the
// [RevisionFile] now and then every every; each time it holds a revision
// other than the last one applied, Follow calls apply once, then ack with
// apply's result. A failed revision is not applied again: the failure is
// acknowledged, and the next revision gets its own try. An ack that fails is
// retried at each poll, without applying again, until it succeeds or a newer
// revision replaces it.
//
// The first revision read, at start, counts as new: a game server that
// restarts applies and acknowledges the mounted revision again. A directory
// without a valid revision (a mount not populated yet) is polled on; its
// error, and an ack's, is logged through ctx's logger (klog.FromContext)
// when it differs from the previous one.
//
// Follow returns nil when ctx is done, and an error only for invalid
// arguments.
func Follow(ctx context.Context, dir string, every time.Duration, apply ApplyFunc, ack AckFunc) error {
	if every <= 0 || apply == nil || ack == nil {
		return errors.New("profileack.Follow: a positive interval, an apply and an ack function are required")
	}
	f := newRevisionFollower(ctx, dir, apply, ack)
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for ctx.Err() == nil {
		f.poll(ctx)
		select {
		case <-ctx.Done():
		case <-ticker.C:
		}
	}
	return nil
}

// revisionFollower is Follow's state between polls.
type revisionFollower struct {
	dir    string
	apply  ApplyFunc
	ack    AckFunc
	logger klog.Logger

	applied  string // the last revision applied, or tried
	applyErr error  // its result
	acked    bool   // its result is acknowledged
	// The errors last logged, not to repeat them at each poll.
	lastReadError, lastAckError string
}

func newRevisionFollower(ctx context.Context, dir string, apply ApplyFunc, ack AckFunc) *revisionFollower {
	return &revisionFollower{dir: dir, apply: apply, ack: ack, logger: klog.FromContext(ctx).WithValues("dir", dir)}
}

// poll reads the revision once, applies it if it is new, and acknowledges
// the last one applied if that is still to do.
func (f *revisionFollower) poll(ctx context.Context) {
	revision, err := ReadRevision(f.dir)
	f.logChange(&f.lastReadError, err, "Reading the profile revision failed; polling on")
	if err == nil && revision != f.applied {
		f.applied, f.acked = revision, false
		f.applyErr = f.apply(ctx, revision)
		if f.applyErr != nil {
			f.logger.Error(f.applyErr, "Applying a profile revision failed", "revision", revision)
		} else {
			f.logger.V(2).Info("Applied a profile revision", "revision", revision)
		}
	}
	if f.applied != "" && !f.acked {
		err := f.ack(ctx, f.applied, f.applyErr)
		f.acked = err == nil
		f.logChange(&f.lastAckError, err, "Acknowledging a profile revision failed; retrying at each poll", "revision", f.applied)
	}
}

// logChange logs err unless it is the one last logged in *last.
func (f *revisionFollower) logChange(last *string, err error, msg string, keysAndValues ...any) {
	switch {
	case err == nil:
		*last = ""
	case err.Error() != *last:
		*last = err.Error()
		f.logger.Error(err, msg, keysAndValues...)
	}
}

// AckFor returns the [AckFunc] that acknowledges on pod namespace/pod with
// client: [Acknowledge], bound to that pod.
func AckFor(client kubernetes.Interface, namespace, pod string) AckFunc {
	return func(ctx context.Context, revision string, applyErr error) error {
		return Acknowledge(ctx, client, namespace, pod, revision, applyErr)
	}
}

// OwnPod returns the namespace and name of the pod this process runs in: the
// name from $POD_NAME, else the host name; the namespace from
// $POD_NAMESPACE, else from the ServiceAccount namespace file the kubelet
// mounts next to the token.
func OwnPod() (namespace, name string, err error) {
	name = os.Getenv(PodNameEnv)
	if name == "" {
		if name, err = os.Hostname(); err != nil {
			return "", "", fmt.Errorf("the pod's name: $%s is not set, and the host name: %w", PodNameEnv, err)
		}
	}
	namespace = os.Getenv(PodNamespaceEnv)
	if namespace == "" {
		data, err := os.ReadFile(serviceAccountNamespaceFile)
		if err != nil {
			return "", "", fmt.Errorf("the pod's namespace: $%s is not set, and %w", PodNamespaceEnv, err)
		}
		namespace = strings.TrimSpace(string(data))
		if namespace == "" {
			return "", "", fmt.Errorf("the pod's namespace: $%s is not set, and %s is empty", PodNamespaceEnv, serviceAccountNamespaceFile)
		}
	}
	return namespace, name, nil
}

// InClusterAck returns the [AckFunc] of a game server running in a pod: it
// acknowledges on the pod [OwnPod] names, with the pod's own ServiceAccount
// token (rest.InClusterConfig, which rereads the projected token as the
// kubelet renews it). That token is bound to the pod, which is what lets the
// admission policy tell the pod's own writes from others.
func InClusterAck() (AckFunc, error) {
	namespace, name, err := OwnPod()
	if err != nil {
		return nil, err
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return AckFor(client, namespace, name), nil
}
