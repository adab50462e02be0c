package controller

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/example/gamesession-controller/pkg/metrics"
)

// The Secret digest key's own Secret: the fields of its data, and how the
// controller watches it.
//
// The controller reads the key once, at start, and digests under it for as
// long as it runs. A key Secret deleted or replaced meanwhile changes nothing
// for this process, nor restarts a game server: a process that starts
// without the key creates a new one, and the Deployments made under the lost
// one keep their digests (sessionInputs). What is lost is a Secret's change
// made while no process held a key. So the controller says loudly that its
// key is gone, in /readyz, an Event and a metric, for someone to put it back
// or rotate it as docs/tenancy.md says, and does not put it back itself: a
// deleted Secret may be a deliberate step of a rotation.
const (
	// DigestKeyField holds the key in its Secret; PreviousDigestKeyField,
	// during a rotation, the key before it.
	DigestKeyField         = "key"
	PreviousDigestKeyField = "previous"
	// keyFingerprintAnnotation holds, on the cached stand-in of the key
	// Secret, its key's fingerprint. It never reaches the API server.
	keyFingerprintAnnotation = "games.example.com/key-fingerprint"
)

// DigestKeySelector selects the key Secret by name, for an informer of the
// one Secret in its namespace.
func DigestKeySelector(name string) string {
	return fields.OneTermEqualSelector("metadata.name", name).String()
}

// DigestKeyStandIn is the transform of the key Secret's informer: the
// Secret's identity and its key's fingerprint, never the key.
func DigestKeyStandIn(obj interface{}) (interface{}, error) {
	secret, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil
	}
	if _, slim := secret.Annotations[keyFingerprintAnnotation]; slim && len(secret.Data) == 0 {
		return obj, nil
	}
	meta := standInMeta(&secret.ObjectMeta, "")
	meta.Annotations = map[string]string{keyFingerprintAnnotation: KeyFingerprint(secret.Data[DigestKeyField])}
	return &corev1.Secret{TypeMeta: secret.TypeMeta, ObjectMeta: meta}, nil
}

// digestKeyWatch follows the key Secret and says when it no longer holds
// the key this process digests under.
type digestKeyWatch struct {
	namespace, name string
	// current is the fingerprint of this process's key.
	current  string
	store    cache.Store
	recorder record.EventRecorder
	metrics  *metrics.ControllerMetrics
	logger   klog.Logger

	mu sync.Mutex
	// reported is the state last reported, so that each change is said once.
	reported string
}

// The states of the key Secret, as gamesession_controller_secret_digest_key
// labels them.
const (
	keyPresent  = "present"
	keyMissing  = "missing"
	keyReplaced = "replaced"
)

func newDigestKeyWatch(informer coreinformers.SecretInformer, namespace, name, current string, recorder record.EventRecorder,
	m *metrics.ControllerMetrics, logger klog.Logger) (*digestKeyWatch, error) {
	w := &digestKeyWatch{namespace: namespace, name: name, current: current, store: informer.Informer().GetStore(),
		recorder: recorder, metrics: m, logger: logger, reported: keyPresent}
	m.ObserveDigestKey(keyPresent)
	_, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(interface{}) { w.report() },
		UpdateFunc: func(_, _ interface{}) { w.report() },
		DeleteFunc: func(interface{}) { w.report() },
	})
	return w, err
}

// state is where the key Secret stands, as the cache shows it.
func (w *digestKeyWatch) state() string {
	obj, exists, err := w.store.GetByKey(w.namespace + "/" + w.name)
	switch {
	case err != nil || !exists:
		return keyMissing
	case metaAnnotation(obj, keyFingerprintAnnotation) != w.current:
		return keyReplaced
	}
	return keyPresent
}

// report says a change of the key Secret's state: a log line, an Event on
// the Secret and the metric.
func (w *digestKeyWatch) report() {
	state := w.state()
	w.mu.Lock()
	defer w.mu.Unlock()
	if state == w.reported {
		return
	}
	w.reported = state
	w.metrics.ObserveDigestKey(state)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.namespace, Name: w.name}}
	switch state {
	case keyMissing:
		w.logger.Error(nil, "The Secret digest key was deleted; this process keeps digesting under the key it read at start, and restarts no game server", "secret", klog.KRef(w.namespace, w.name))
		w.recorder.Event(secret, corev1.EventTypeWarning, "SecretDigestKeyDeleted", w.problem(state).Error())
	case keyReplaced:
		w.logger.Error(nil, "The Secret digest key holds another key than this process digests under; restart the controller to use it", "secret", klog.KRef(w.namespace, w.name))
		w.recorder.Event(secret, corev1.EventTypeWarning, "SecretDigestKeyReplaced", w.problem(state).Error())
	default:
		w.logger.Info("The Secret digest key holds this process's key again", "secret", klog.KRef(w.namespace, w.name))
		w.recorder.Event(secret, corev1.EventTypeNormal, "SecretDigestKeyRestored", "The Secret holds the key the controller digests under again")
	}
}

// problem says what is wrong with the key Secret, for /readyz; nil when it
// holds this process's key.
func (w *digestKeyWatch) problem(state string) error {
	switch state {
	case keyMissing:
		return fmt.Errorf("the Secret digest key %s/%s is gone: this process digests under the key it read at start, "+
			"but one that starts without it makes a new key, and Secrets changed while no process held the old one are not rolled "+
			"until they change again; create it again from a backup, or rotate the key (docs/tenancy.md)", w.namespace, w.name)
	case keyReplaced:
		return fmt.Errorf("the Secret digest key %s/%s holds another key than this process digests under: restart the controller to use it", w.namespace, w.name)
	}
	return nil
}

// Problem says what is wrong with the key Secret, for /readyz; nil when it
// holds the key this process digests under.
func (w *digestKeyWatch) Problem() error {
	return w.problem(w.state())
}
