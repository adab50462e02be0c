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

// secretDigestKeyField is the key of the digest key in its Secret;
// previousDigestKeyField, during a rotation, the key before it.
const (
	secretDigestKeyField   = controller.DigestKeyField
	previousDigestKeyField = controller.PreviousDigestKeyField
)

// madeByControllerAnnotation marks a key Secret the controller made for want
// of one: a Deployment that records no key was then made under an earlier
// key, lost (controller.SecretDigestKeys.Created). A rotation's Secret,
// made by hand, has none.
const madeByControllerAnnotation = "games.example.com/made-by-controller"

// errBadDigestKey is a digest key Secret that only a user can repair.
var errBadDigestKey = errors.New("bad Secret digest key")

// waitForSecretDigestKey is secretDigestKey, tried again with backoff for as
// long as the API server refuses or fails it: a missing RBAC rule shows in
// the log and in /readyz (the caches never sync), and once fixed the
// controller starts without a restart. It returns ctx's error when ctx ends
// first, and at once for a key Secret that only a user can repair.
func waitForSecretDigestKey(ctx context.Context, client kubernetes.Interface, namespace, name string) (controller.SecretDigestKeys, error) {
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Steps: math.MaxInt32, Cap: 30 * time.Second}
	for {
		key, err := secretDigestKey(ctx, client, namespace, name)
		if err == nil || errors.Is(err, errBadDigestKey) {
			return key, err
		}
		klog.FromContext(ctx).Error(err, "Cannot read the Secret digest key; no labelled Secret is tracked and no session is synced until it can")
		select {
		case <-ctx.Done():
			return controller.SecretDigestKeys{}, ctx.Err()
		case <-time.After(backoff.Step()):
		}
	}
}

// secretDigestKey returns the keys of the Secret digests, from the Secret
// namespace/name, which it creates with a random key the first time: the
// key, and during a rotation the previous one. The key should outlive the
// process: a new one cannot check the digests made under the last, and
// takes them as they are (controller.SecretDigestKeys). Replicas share it
// through the Secret; the first to create it wins, the others read it.
//
// This is the controller's only read of a Secret's data, and of one Secret of
// its own: a GET by name, which RBAC limits to that name.
func secretDigestKey(ctx context.Context, client kubernetes.Interface, namespace, name string) (controller.SecretDigestKeys, error) {
	secrets := client.CoreV1().Secrets(namespace)
	for range 3 {
		existing, err := secrets.Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			keys := controller.SecretDigestKeys{Current: existing.Data[secretDigestKeyField], Previous: existing.Data[previousDigestKeyField],
				Created: existing.Annotations[madeByControllerAnnotation] == "true"}
			if len(keys.Current) < 32 || len(keys.Previous) > 0 && len(keys.Previous) < 32 {
				return controller.SecretDigestKeys{}, fmt.Errorf("%w: secret %s/%s holds no digest key of at least 32 bytes in %q (nor, if it has one, in %q): write one, or delete the Secret and the controller creates a new key (docs/tenancy.md, rotating the digest key)",
					errBadDigestKey, namespace, name, secretDigestKeyField, previousDigestKeyField)
			}
			return keys, nil
		case !apierrors.IsNotFound(err):
			return controller.SecretDigestKeys{}, fmt.Errorf("reading the Secret digest key %s/%s: %w", namespace, name, err)
		}
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return controller.SecretDigestKeys{}, err
		}
		_, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:      name,
				Namespace: namespace,
				Labels:    map[string]string{"app.kubernetes.io/name": controller.Name},
				Annotations: map[string]string{
					madeByControllerAnnotation:  "true",
					"games.example.com/purpose": "Keys the digests of labelled Secrets in GameSession pod templates. Keep it: see docs/tenancy.md for how to rotate it.",
				},
			},
			Type:      corev1.SecretTypeOpaque,
			Immutable: ptr.To(true),
			Data:      map[string][]byte{secretDigestKeyField: key},
		}, metav1.CreateOptions{FieldManager: controller.Name})
		switch {
		case err == nil:
			klog.FromContext(ctx).Info("Created the Secret digest key", "secret", klog.KRef(namespace, name))
			return controller.SecretDigestKeys{Current: key, Created: true}, nil
		case !apierrors.IsAlreadyExists(err):
			return controller.SecretDigestKeys{}, fmt.Errorf("creating the Secret digest key %s/%s: %w", namespace, name, err)
		}
		// Another replica created it meanwhile: read it.
	}
	return controller.SecretDigestKeys{}, fmt.Errorf("the Secret digest key %s/%s was created and deleted again, three times", namespace, name)
}
