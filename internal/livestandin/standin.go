package livestandin

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/example/gamesession-controller/pkg/controller"
	"github.com/example/gamesession-controller/pkg/profileack"
)

// Answer says how a session's game servers answer a revision, given the
// files their live profile holds: apply it (ack true, nil error), refuse it
// (ack true, an error), or stay silent (ack false).
type Answer func(session, revision string, files map[string]string) (ack bool, err error)

// Options configure a stand-in.
type Options struct {
	// Namespace is where it acts; "" is every namespace.
	Namespace string
	// Every is how often it looks; 0 is 100ms.
	Every time.Duration
	// Delay is how long after it first sees a session holding a revision
	// it answers: the kubelet's propagation delay and the game server's
	// reload, both zero-cost here.
	Delay time.Duration
	// Answer, nil for applying everything.
	Answer Answer
}

// StandIn acknowledges live deliveries and records when.
type StandIn struct {
	client kubernetes.Interface
	opts   Options

	mu     sync.Mutex
	answer Answer
	// seen is when each "session revision" was first seen delivered, and
	// acked when every pod of the session had acknowledged it.
	seen, acked map[string]time.Time
}

// New returns a stand-in; Run starts it.
func New(client kubernetes.Interface, opts Options) *StandIn {
	if opts.Every == 0 {
		opts.Every = 100 * time.Millisecond
	}
	return &StandIn{client: client, opts: opts, answer: opts.Answer,
		seen: map[string]time.Time{}, acked: map[string]time.Time{}}
}

// SetAnswer changes how the game servers answer from now on.
func (s *StandIn) SetAnswer(a Answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answer = a
}

// Run acknowledges until ctx ends.
func (s *StandIn) Run(ctx context.Context) {
	_ = wait.PollUntilContextCancel(ctx, s.opts.Every, true, func(ctx context.Context) (bool, error) {
		s.round(ctx)
		return false, nil
	})
}

// Seen and Acked return when the session ("namespace/name") was first seen
// holding revision, and when all its pods had acknowledged it; ok false for
// not yet.
func (s *StandIn) Seen(session, revision string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.seen[session+" "+revision]
	return t, ok
}

// Acked: see Seen.
func (s *StandIn) Acked(session, revision string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.acked[session+" "+revision]
	return t, ok
}

func (s *StandIn) round(ctx context.Context) {
	profiles, err := s.client.CoreV1().ConfigMaps(s.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: controller.LiveProfileSelector()})
	if err != nil {
		return
	}
	pods, err := s.client.CoreV1().Pods(s.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: controller.LivePodSelector()})
	if err != nil {
		return
	}
	revisionOf := map[string]string{}         // "namespace/session" → revision
	filesOf := map[string]map[string]string{} // and its files
	for _, cm := range profiles.Items {
		if ref := metav1.GetControllerOf(&cm); ref != nil {
			revisionOf[cm.Namespace+"/"+ref.Name] = cm.Data[profileack.RevisionFile]
			filesOf[cm.Namespace+"/"+ref.Name] = cm.Data
		}
	}
	pending := map[string]int{}
	now := time.Now()
	for _, pod := range pods.Items {
		session := pod.Namespace + "/" + pod.Labels[controller.LabelInstance]
		revision := revisionOf[session]
		if revision == "" || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
			continue
		}
		key := session + " " + revision
		s.mu.Lock()
		first, ok := s.seen[key]
		if !ok {
			first, s.seen[key] = now, now
		}
		answer := s.answer
		s.mu.Unlock()
		if a, ok := profileack.Parse(pod.Annotations[profileack.Annotation]); ok && a.Revision == revision {
			continue
		}
		pending[session]++
		if now.Sub(first) < s.opts.Delay {
			continue
		}
		var applyErr error
		if answer != nil {
			var ack bool
			if ack, applyErr = answer(pod.Labels[controller.LabelInstance], revision, filesOf[session]); !ack {
				continue
			}
		}
		if err := profileack.Acknowledge(ctx, s.client, pod.Namespace, pod.Name, revision, applyErr); err == nil {
			pending[session]--
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for session, revision := range revisionOf {
		key := session + " " + revision
		if _, seen := s.seen[key]; seen && pending[session] == 0 {
			if _, done := s.acked[key]; !done {
				s.acked[key] = time.Now()
			}
		}
	}
}
