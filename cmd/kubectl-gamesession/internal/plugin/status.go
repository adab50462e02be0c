package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
	gameinformers "github.com/example/gamesession-controller/pkg/generated/informers/externalversions/games/v1"
	gamelisters "github.com/example/gamesession-controller/pkg/generated/listers/games/v1"
)

// StatusOptions configure Status.
type StatusOptions struct {
	// Namespace and Profile name the profile ConfigMap.
	Namespace, Profile string
	// Watch follows the rollout until it completes or halts; false prints
	// where it stands once.
	Watch bool
	// Timeout, when positive, bounds the watch.
	Timeout time.Duration
	// TTY redraws the progress line in place; otherwise a new line is
	// printed whenever its numbers change.
	TTY bool
	// Now is the clock of the estimate; nil is time.Now.
	Now func() time.Time
}

// ErrHalted is returned (wrapped) by Status when the brake halted the
// rollout of the profile's current content.
var ErrHalted = errors.New("rollout halted")

// errTimeout is the cause of a watch that ran out of time.
var errTimeout = errors.New("timeout")

// settleGrace is how long a watch waits, once the ProfileRollout says
// Complete or Halted, for the live counts to agree (see state.settled and
// state.failuresShown) before it reports the end with the counts it has.
// A variable for the tests.
var settleGrace = 10 * time.Second

// Status prints where the rollout of a profile stands and, with o.Watch,
// follows it until it completes (nil) or halts (ErrHalted), or o.Timeout
// passes (an error too).
//
// The target is the content hash of the profile as it is now, the hash the
// controller puts into the ProfileRollout's targetHash. Only a
// ProfileRollout whose targetHash is that hash tells anything of the
// target's rollout: right after an edit, until the controller picked it up,
// the ProfileRollout still reports on the content before, which may well be
// Complete.
func Status(ctx context.Context, c Clients, out io.Writer, o StatusOptions) error {
	if o.Now == nil {
		o.Now = time.Now
	}
	r := &reporter{p: &printer{out: out, tty: o.TTY}, profile: o.Profile}
	// The reads of --watch=false; a watch starts with them too, so that a
	// missing profile, a missing CRD or a refused read fails at once rather
	// than in informers retrying for ever.
	profile, err := getProfile(ctx, c, o.Namespace, o.Profile)
	if err != nil {
		return err
	}
	pr, err := getRollout(ctx, c, o.Namespace, o.Profile)
	if err != nil {
		return err
	}
	if note := unlabelledNote(profile); note != "" {
		r.p.line("%s", note)
	}
	opts := metav1.ListOptions{}
	if o.Watch {
		opts.Limit = 1 // the informer lists them all
	}
	list, err := c.Game.GamesV1().GameSessions(o.Namespace).List(ctx, opts)
	if err != nil {
		return fmt.Errorf("listing GameSessions: %w", err)
	}
	if !o.Watch {
		sessions := make([]*gamesv1.GameSession, len(list.Items))
		for i := range list.Items {
			sessions[i] = &list.Items[i]
		}
		done, err := r.show(assess(o.Profile, profile, pr, sessions, o.Now()), true)
		r.p.done()
		if done || err != nil {
			return err
		}
		return r.p.err
	}
	return watchStatus(ctx, c, r, o)
}

// watchStatus follows the profile, its ProfileRollout and the GameSessions
// of the namespace with informers, and reports after every change.
func watchStatus(ctx context.Context, c Clients, r *reporter, o StatusOptions) error {
	var cancel context.CancelFunc
	if o.Timeout > 0 {
		ctx, cancel = context.WithTimeoutCause(ctx, o.Timeout, errTimeout)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	// The profile and its ProfileRollout are watched by name; the sessions
	// of the namespace all, since the API server cannot select them by
	// spec.profileRef: ComputeCounts skips the others. One informer each,
	// not informer factories, which would link in every API group's.
	byName := func(opts *metav1.ListOptions) {
		opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", o.Profile).String()
	}
	byNamespace := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	profileInformer := coreinformers.NewFilteredConfigMapInformer(c.Kube, o.Namespace, 0, byNamespace, byName)
	rolloutInformer := gameinformers.NewFilteredProfileRolloutInformer(c.Game, o.Namespace, 0, byNamespace, byName)
	sessionInformer := gameinformers.NewFilteredGameSessionInformer(c.Game, o.Namespace, 0, byNamespace, nil)
	profiles := corelisters.NewConfigMapLister(profileInformer.GetIndexer())
	rollouts := gamelisters.NewProfileRolloutLister(rolloutInformer.GetIndexer())
	sessions := gamelisters.NewGameSessionLister(sessionInformer.GetIndexer())
	informers := []cache.SharedIndexInformer{profileInformer, rolloutInformer, sessionInformer}
	var running sync.WaitGroup
	defer func() {
		cancel() // stops the informers
		running.Wait()
	}()

	// One pending wake-up stands for any number of events: a report reads
	// the caches as they are then, whatever changed.
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}
	for _, informer := range informers {
		if _, err := informer.AddEventHandler(handler); err != nil {
			return err
		}
	}
	for _, informer := range informers {
		running.Go(func() { informer.RunWithContext(ctx) })
	}
	ended := func() error {
		if errors.Is(context.Cause(ctx), errTimeout) {
			r.p.done()
			return fmt.Errorf("timed out after %s waiting for the rollout of profile %s", o.Timeout, o.Profile)
		}
		return ctx.Err()
	}
	if !cache.WaitForCacheSync(ctx.Done(), profileInformer.HasSynced, rolloutInformer.HasSynced, sessionInformer.HasSynced) {
		return ended()
	}
	// settle runs while the ProfileRollout says Complete or Halted and the
	// live counts do not agree yet; graceOver once it fired.
	var settle *time.Timer
	graceOver := false
	defer func() {
		if settle != nil {
			settle.Stop()
		}
	}()
	for {
		profile, err := profiles.ConfigMaps(o.Namespace).Get(o.Profile)
		if apierrors.IsNotFound(err) {
			r.p.done()
			return fmt.Errorf("profile %s was deleted", o.Profile)
		}
		if err != nil {
			return err
		}
		pr, err := rollouts.ProfileRollouts(o.Namespace).Get(o.Profile)
		if apierrors.IsNotFound(err) {
			pr = nil
		} else if err != nil {
			return err
		}
		list, err := sessions.GameSessions(o.Namespace).List(labels.Everything())
		if err != nil {
			return err
		}
		s := assess(o.Profile, profile, pr, list, o.Now())
		switch {
		case !s.ended() && settle != nil:
			// Not Complete after all: a later Complete gets a grace of its own.
			settle.Stop()
			settle, graceOver = nil, false
		case s.ended() && settle == nil:
			settle = time.NewTimer(settleGrace)
		}
		if done, err := r.show(s, graceOver); done || err != nil {
			r.p.done()
			return err
		}
		if r.p.err != nil {
			return r.p.err
		}
		var graceC <-chan time.Time
		if settle != nil {
			graceC = settle.C
		}
		select {
		case <-ctx.Done():
			return ended()
		case <-changed:
		case <-graceC:
			graceOver = true
		}
	}
}

// state is what one look at the caches (or one set of reads) found.
type state struct {
	profile string
	// target is the content hash of the profile now.
	target string
	// rollout is the ProfileRollout, nil if there is none.
	rollout *gamesv1.ProfileRollout
	counts  Counts
	eta     string
}

// assess derives the state of the rollout of profile, at now.
func assess(name string, profile *corev1.ConfigMap, pr *gamesv1.ProfileRollout, sessions []*gamesv1.GameSession, now time.Time) state {
	s := state{profile: name, target: controller.ProfileHash(profile), rollout: pr}
	var start *metav1.Time
	if s.fresh() {
		start = pr.Status.StartTime
	}
	s.counts = ComputeCounts(sessions, name, s.target, start, s.fresh() && pr.Status.Delivery == "live")
	s.eta = "?"
	// From the counts even when Complete: a Complete the counts do not
	// agree with yet (see settled) is not done.
	if s.complete() || s.progressing() {
		s.eta = formatETA(EstimateRemaining(s.counts, start, now))
	}
	return s
}

// fresh reports whether the ProfileRollout is about the profile's content
// now, not one before it.
func (s state) fresh() bool {
	return s.rollout != nil && s.rollout.Status.TargetHash == s.target
}

// complete reports whether the rollout of the profile's current content is
// done: its ProfileRollout says Complete of that very content.
func (s state) complete() bool {
	return s.fresh() && meta.IsStatusConditionTrue(s.rollout.Status.Conditions, gamesv1.ConditionComplete)
}

// settled reports live counts that agree with a completion: every session
// moved, Ready or failed, and at least as many Ready as the ProfileRollout
// counted. The ProfileRollout may say Complete before they do: the
// controller goes by the Deployments, whose sessions' statuses (what the
// counts go by) follow a moment later and may still show a failure of the
// revision before; and a first sync, before any session has a Deployment,
// finds nothing to roll and says Complete of no sessions.
func (s state) settled() bool {
	c := s.counts
	return c.Moved == c.Total && c.Ready+c.Failed == c.Total &&
		c.Ready >= min(int(s.rollout.Status.ReadySessions), c.Total)
}

// halted reports whether the brake halted the rollout of the current
// content. A halt of an earlier content is over: changing the content
// releases it.
func (s state) halted() bool {
	return s.fresh() && s.rollout.Status.Phase == gamesv1.RolloutPhaseHalted
}

// failuresShown reports live counts that show at least the failures the
// ProfileRollout counted. The controller halts on what the Deployments
// report; the failed sessions' statuses say so a moment later.
func (s state) failuresShown() bool {
	return s.counts.Failed >= min(int(s.rollout.Status.FailedSessions), s.counts.Total)
}

// ended reports a ProfileRollout that says the rollout of the current
// content is over, one way or the other.
func (s state) ended() bool {
	return s.complete() || s.halted()
}

// progressing reports a rollout that moves sessions now, the only one whose
// rate says anything about the time left: a paused, halted or waiting one
// may stand still for any time.
func (s state) progressing() bool {
	if !s.fresh() {
		return false
	}
	switch s.rollout.Status.Phase {
	// Complete too: the phase may say so a moment before the condition.
	case gamesv1.RolloutPhaseCanary, gamesv1.RolloutPhaseRolling, gamesv1.RolloutPhaseComplete, "":
		return true
	}
	return false
}

// phase is the phase and message to show: the ProfileRollout's when it is
// about the current content, else why there is none yet.
func (s state) phase() (phase, message string) {
	switch {
	case s.rollout == nil:
		return "Pending", "waiting for the controller to create the ProfileRollout"
	case !s.fresh():
		return "Pending", fmt.Sprintf("waiting for the controller to start the rollout (the ProfileRollout still targets %s)",
			orNone(s.rollout.Status.TargetRevision))
	}
	st := s.rollout.Status
	message = st.Message
	if st.Phase == gamesv1.RolloutPhaseWaiting && st.ResumeTime != nil {
		message += fmt.Sprintf(" (resumes at %s)", st.ResumeTime.UTC().Format(time.RFC3339))
	}
	return string(st.Phase), message
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// reporter prints the states Status goes through: what changed, then the
// progress line.
type reporter struct {
	p       *printer
	profile string
	// target, phase and message are those last printed.
	target, phase, message string
}

// show prints s. done is true once the rollout of the current content
// completed or halted and, unless anyway, the live counts agree; err is
// non-nil when it halted.
func (r *reporter) show(s state, anyway bool) (done bool, err error) {
	revision := controller.RevisionName(r.profile, s.target)
	if s.target != r.target {
		r.target = s.target
		r.p.line("rollout of profile %s to revision %s", r.profile, revision)
	}
	if phase, message := s.phase(); phase != r.phase || message != r.message {
		r.phase, r.message = phase, message
		if message == "" {
			r.p.line("%s", phase)
		} else {
			r.p.line("%s: %s", phase, message)
		}
	}
	c := s.counts
	r.p.progress(progressLine(c, s.eta), fmt.Sprint(c.Total, c.Moved, c.Ready, c.Busy, c.Failed))
	switch {
	case s.halted() && (anyway || s.failuresShown()):
		r.p.done()
		return true, fmt.Errorf("%w: profile %s, revision %s: %s", ErrHalted, r.profile, revision, s.rollout.Status.Message)
	case s.complete() && (anyway || s.settled()):
		r.p.done()
		verb := "ready"
		if c.Live {
			verb = "applied it (delivered live)"
		}
		r.p.line("rollout of profile %s to revision %s complete: %d of %d sessions %s, %d failed",
			r.profile, revision, c.Ready, c.Total, verb, c.Failed)
		return true, r.p.err
	}
	return false, nil
}
