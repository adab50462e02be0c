package controller

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/tools/cache"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// The canary of a rotation.
//
// A profile's canary (rollout.games.example.com/canary) moves the first of
// its sessions, in name order, before the others: for a new content of the
// profile, and for new data of a Secret or ConfigMap its sessions read. A
// rotation has no revision of its own, and sessions reading different
// objects take different data, so a rotation's canary is per object: the
// first canary-many members of the profile's rollout, in name order, that
// read it. A session moves for new data once the canaries of every object
// it reads run the data they want and are Ready; while one of them has
// failed, none of the others moves (the profile's input moves are halted,
// as for the brake). New data of the object moves its canaries again.
//
// The canaries are fixed by name and read from the caches, like the
// profile's own: nothing is kept for them, so nothing is lost on a restart.
// A canary can only wait for a session earlier in name order, so the waits
// never go round in a circle.

// inputObject names a referenced input: its kind and "namespace/name".
type inputObject struct {
	kind, key string
}

// inputRead is an object a session's pods are to run with, and the digest
// of its data now.
type inputRead struct {
	object inputObject
	digest string
}

// inputReads are the labelled objects of every tracked kind that the
// session's template reads and the caches hold, with their digests.
func (c *caches) inputReads(session *gamesv1.GameSession) []inputRead {
	var reads []inputRead
	for _, in := range c.inputs {
		if in.cache == nil {
			continue
		}
		for _, name := range in.read(session.Spec.Template) {
			key := session.Namespace + "/" + name
			if obj, found, err := in.cache.GetByKey(key); err == nil && found {
				reads = append(reads, inputRead{object: inputObject{kind: in.kind(), key: key}, digest: in.digest(obj)})
			}
		}
	}
	return reads
}

// canaryMember is a member of a profile's rollout as the canaries of its
// rotations see it.
type canaryMember struct {
	name  string // as the rollout names members (memberName)
	reads []inputRead
	// settled: its Deployment runs the data the session wants, and is
	// Ready. failed: it runs them, and exceeded its progress deadline.
	settled, failed bool
}

// inputCanary is the canary of the rotation of one object to the data of
// digest: its first n readers, and where they stand.
type inputCanary struct {
	digest  string
	members []string
	// moving counts the canaries that do not run the data they want Ready
	// yet; the canary passed when none does. failed names one whose
	// Deployment failed on them, "" if none did.
	moving int
	failed string
}

// passed reports whether every canary runs the data it wants and is Ready.
func (c inputCanary) passed() bool { return c.moving == 0 }

// decideInputCanaries is the canary of every object the members read, each
// its first n readers: members is in name order. It reads nothing but its
// arguments.
func decideInputCanaries(n int, members []canaryMember) map[inputObject]inputCanary {
	canaries := map[inputObject]inputCanary{}
	for _, m := range members {
		for _, r := range m.reads {
			c, known := canaries[r.object]
			if !known {
				c = inputCanary{digest: r.digest}
			}
			if len(c.members) < n {
				c.members = append(c.members, m.name)
				if !m.settled {
					c.moving++
				}
				if m.failed && c.failed == "" {
					c.failed = m.name
				}
			}
			canaries[r.object] = c
		}
	}
	return canaries
}

// readingMember is a member of a profile's rollout whose pod template reads
// labelled objects: its session and Deployment as the caches show them, and
// what it reads. rolloutMembers collects them in its pass over the members.
type readingMember struct {
	name       string // as the rollout names members (memberName)
	session    *gamesv1.GameSession
	deployment *appsv1.Deployment
	reads      []inputRead
}

// canaryMembers are the readers decideInputCanaries learns from, in name
// order (pickCanaryMembers): where a Deployment stands is read for the
// canaries alone.
func (c *profileController) canaryMembers(readers []readingMember, n int) []canaryMember {
	return pickCanaryMembers(readers, n, func(r readingMember) (settled, failed bool) {
		have, want, _, err := c.sessionInputs(r.session, r.deployment)
		onWanted := err == nil && slices.Equal(want, have)
		failed = onWanted && c.progressDeadlineExceeded(r.deployment)
		return onWanted && deploymentComplete(r.deployment) && !failed, failed
	})
}

// pickCanaryMembers sorts the readers by name and keeps those that
// decideInputCanaries learns from: the first n readers of each object, its
// canaries, with where they stand (status), and the first reader of each,
// whose digest plans it (one of the canaries, unless n is 0). A reader past
// the canaries of every object it reads changes nothing in them: a plan of
// thousands of sessions passes on all but a few.
func pickCanaryMembers(readers []readingMember, n int, status func(readingMember) (settled, failed bool)) []canaryMember {
	slices.SortFunc(readers, func(a, b readingMember) int { return strings.Compare(a.name, b.name) })
	var members []canaryMember
	picked := map[inputObject]int{}
	for _, r := range readers {
		canary, first := false, false
		for _, read := range r.reads {
			switch count, seen := picked[read.object]; {
			case count < n:
				picked[read.object] = count + 1
				canary = true
			case !seen: // n is 0
				picked[read.object] = 0
				first = true
			}
		}
		if !canary && !first {
			continue
		}
		m := canaryMember{name: r.name, reads: r.reads}
		if canary {
			m.settled, m.failed = status(r)
		}
		members = append(members, m)
	}
	return members
}

// sameInputCanaries reports whether two plans' canaries are alike: if not,
// the sessions that wait for them hear of it.
func sameInputCanaries(a, b map[inputObject]inputCanary) bool {
	return maps.EqualFunc(a, b, func(x, y inputCanary) bool {
		return x.digest == y.digest && x.moving == y.moving && x.failed == y.failed && slices.Equal(x.members, y.members)
	})
}

// inputCanaryStatus is the ProfileRollout's record of the canaries that
// have not passed: at most 10, in kind and key order.
func inputCanaryStatus(canaries map[inputObject]inputCanary) []gamesv1.InputCanary {
	var out []gamesv1.InputCanary
	for _, object := range slices.SortedFunc(maps.Keys(canaries), func(a, b inputObject) int {
		return strings.Compare(a.kind+"\x00"+a.key, b.kind+"\x00"+b.key)
	}) {
		c := canaries[object]
		if c.passed() || len(out) == 10 {
			continue
		}
		namespace, name, _ := cache.SplitMetaNamespaceKey(object.key)
		out = append(out, gamesv1.InputCanary{Kind: object.kind, Namespace: namespace, Name: name,
			Sessions: slices.Clone(c.members[:min(len(c.members), 10)]), CanarySessions: int32(len(c.members)),
			MovingSessions: int32(c.moving), Failed: c.failed})
	}
	return out
}

// canaryWait says why the session's move for new data waits for a canary,
// "" if it does not: the latest plan has not seen the data it wants yet, or
// the canary of an object it reads, which it is not one of, has not passed.
func (v *sessionView) canaryWait() string {
	if v.live || !v.policy.AsksForCanary() {
		// A Deployment out of the cache is no member of the plan: its session
		// is its own canary.
		return ""
	}
	if stale := v.canaryPlanStale(); stale != nil {
		if stale.kind == "" {
			return "it waits for the profile's rollout plan to pick the canary of its Secrets and ConfigMaps"
		}
		return fmt.Sprintf("it waits for the profile's rollout plan to pick the canary of the new data of %s %s", stale.kind, stale.key)
	}
	for _, r := range v.reads {
		c := v.latest.inputCanaries[r.object]
		switch {
		case slices.Contains(c.members, v.member):
		case c.failed != "":
			return fmt.Sprintf("the canary %s of the new data of %s %s failed", c.failed, r.object.kind, r.object.key)
		case !c.passed():
			return fmt.Sprintf("the canary of the new data of %s %s moves first: %s", r.object.kind, r.object.key,
				strings.Join(c.members[:min(len(c.members), 3)], ", "))
		}
	}
	return ""
}

// canaryPlanStale names an object whose new data the session wants and the
// profile's latest plan has not picked canaries for (an empty one when
// there is no plan under this policy), or one the plan has a canary for that
// the session's template reads and the caches no longer hold; nil if there
// is none. Whether or not the session may move now, the plan is to see the
// change: the ProfileRollout names the canaries of every rotation under way,
// and of none that is over.
func (v *sessionView) canaryPlanStale() *inputObject {
	if v.live || !v.policy.AsksForCanary() {
		return nil
	}
	pp := v.latest
	if pp == nil || pp.policy != v.policy.String() || pp.inputCanaries == nil {
		return &inputObject{}
	}
	for _, r := range v.reads {
		if c, planned := pp.inputCanaries[r.object]; !planned || c.digest != r.digest {
			return &r.object
		}
	}
	for object := range pp.inputCanaries {
		if v.readsGone(object) {
			return &object
		}
	}
	return nil
}

// readsGone reports whether the session's template reads object, and the
// caches do not hold it (it is gone, or lost its label).
func (v *sessionView) readsGone(object inputObject) bool {
	if slices.ContainsFunc(v.reads, func(r inputRead) bool { return r.object == object }) {
		return false
	}
	for _, in := range v.inputs {
		if in.kind() != object.kind {
			continue
		}
		for _, name := range in.read(v.session.Spec.Template) {
			if v.session.Namespace+"/"+name == object.key {
				return true
			}
		}
	}
	return false
}
