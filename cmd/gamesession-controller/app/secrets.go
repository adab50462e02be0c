package app

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/pkg/controller"
)

// secretDigestKeyField is the key of the digest key in its Secret.
const secretDigestKeyField = "key"

// errBadDigestKey is a digest key Secret that only a user can repair.
var errBadDigestKey = errors.New("bad Secret digest key")

// waitForSecretDigestKey is secretDigestKey, tried again with backoff for as
// long as the API server refuses or fails it: a missing RBAC rule shows in
// the log and in /readyz (the caches never sync), and once fixed the
// controller starts without a restart. It returns ctx's error when ctx ends
// first, and at once for a key Secret that only a user can repair.
func waitForSecretDigestKey(ctx context.Context, client kubernetes.Interface, namespace, name string) ([]byte, error) {
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Steps: math.MaxInt32, Cap: 30 * time.Second}
	for {
		key, err := secretDigestKey(ctx, client, namespace, name)
		if err == nil || errors.Is(err, errBadDigestKey) {
			return key, err
		}
		klog.FromContext(ctx).Error(err, "Cannot read the Secret digest key; no labelled Secret is tracked and no session is synced until it can")
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff.Step()):
		}
	}
}

// secretDigestKey returns the key of the Secret digests, from the Secret
// namespace/name, which it creates with a random key the first time. The key
// must outlive the process: a new one would change every digest, and so
// restart every game server that uses a labelled Secret. Replicas share it
// through the Secret; the first to create it wins, the others read it.
//
// This is the controller's only read of a Secret's data, and of one Secret of
// its own: a GET by name, which RBAC limits to that name.
func secretDigestKey(ctx context.Context, client kubernetes.Interface, namespace, name string) ([]byte, error) {
	secrets := client.CoreV1().Secrets(namespace)
	for range 3 {
		existing, err := secrets.Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			key := existing.Data[secretDigestKeyField]
			if len(key) < 32 {
				return nil, fmt.Errorf("%w: secret %s/%s holds no digest key of at least 32 bytes in %q: delete it, and the controller creates a new one (every game server that uses a labelled Secret then restarts once)",
					errBadDigestKey, namespace, name, secretDigestKeyField)
			}
			return key, nil
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading the Secret digest key %s/%s: %w", namespace, name, err)
		}
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		_, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:      name,
				Namespace: namespace,
				Labels:    map[string]string{"app.kubernetes.io/name": controller.Name},
				Annotations: map[string]string{
					"games.example.com/purpose": "Keys the digests of labelled Secrets in GameSession pod templates. Deleting it restarts every game server that uses one.",
				},
			},
			Type:      corev1.SecretTypeOpaque,
			Immutable: ptr.To(true),
			Data:      map[string][]byte{secretDigestKeyField: key},
		}, metav1.CreateOptions{FieldManager: controller.Name})
		switch {
		case err == nil:
			klog.FromContext(ctx).Info("Created the Secret digest key", "secret", klog.KRef(namespace, name))
			return key, nil
		case !apierrors.IsAlreadyExists(err):
			return nil, fmt.Errorf("creating the Secret digest key %s/%s: %w", namespace, name, err)
		}
		// Another replica created it meanwhile: read it.
	}
	return nil, fmt.Errorf("the Secret digest key %s/%s was created and deleted again, three times", namespace, name)
}
