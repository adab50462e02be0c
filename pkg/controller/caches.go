package controller

import (
	"sync/atomic"

	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	gameslisters "github.com/example/gamesession-controller/pkg/generated/listers/games/v1"
)

// caches are the informers' listers and indexes, what both controllers read:
// the session controller to make a session's Deployment, the profile
// controller to plan a profile's rollout. Nothing here is written by a sync
// but the memo of profile hashes; the informers fill it, and the read helpers
// on it (cachedProfile, sessionKeysOf, referencePermitted, sessionInputs...)
// are queries of it.
type caches struct {
	sessionLister     gameslisters.GameSessionLister
	sessionIndexer    cache.Indexer
	rolloutLister     gameslisters.ProfileRolloutLister
	profileLister     corelisters.ConfigMapLister
	revisionLister    corelisters.ConfigMapLister
	revisionIndexer   cache.Indexer
	deploymentLister  appslisters.DeploymentLister
	deploymentIndexer cache.Indexer
	replicaSetIndexer cache.Indexer
	// liveProfileLister and livePodIndexer are nil when live delivery is
	// off (Informers.LiveProfiles, LivePods).
	liveProfileLister corelisters.ConfigMapLister
	livePodIndexer    cache.Indexer
	grants            atomic.Pointer[grantChecker] // nil: no ReferenceGrant API (yet)
	// inputs are the kinds of referenced input tracked (inputs.go), each
	// with its cache (nil for a kind whose informer is not given).
	inputs []input
	// profileHashes hashes each profile version once (profile.go).
	profileHashes *profileHashCache

	namespace       string // Options.Namespace
	profileSelector string // Options.ProfileSelector, for messages
	logger          klog.Logger
}

func newCaches(informers Informers, opts Options, logger klog.Logger) *caches {
	c := &caches{
		sessionLister:     informers.Sessions.Lister(),
		sessionIndexer:    informers.Sessions.Informer().GetIndexer(),
		rolloutLister:     informers.Rollouts.Lister(),
		profileLister:     informers.Profiles.Lister(),
		revisionLister:    informers.Revisions.Lister(),
		revisionIndexer:   informers.Revisions.Informer().GetIndexer(),
		deploymentLister:  informers.Deployments.Lister(),
		deploymentIndexer: informers.Deployments.Informer().GetIndexer(),
		replicaSetIndexer: informers.ReplicaSets.Informer().GetIndexer(),
		inputs:            informers.inputs(),
		profileHashes:     newProfileHashCache(),
		namespace:         opts.Namespace,
		profileSelector:   opts.ProfileSelector,
		logger:            logger,
	}
	if informers.Grants != nil {
		c.grants.Store(&grantChecker{indexer: informers.Grants.GetIndexer()})
	}
	if informers.LiveProfiles != nil && informers.LivePods != nil {
		c.liveProfileLister = informers.LiveProfiles.Lister()
		c.livePodIndexer = informers.LivePods.Informer().GetIndexer()
	}
	return c
}

// synced are the HasSynced of every informer given.
func (i Informers) synced() []cache.InformerSynced {
	synced := []cache.InformerSynced{
		i.Sessions.Informer().HasSynced,
		i.Rollouts.Informer().HasSynced,
		i.Profiles.Informer().HasSynced,
		i.Revisions.Informer().HasSynced,
		i.Deployments.Informer().HasSynced,
		i.ReplicaSets.Informer().HasSynced,
	}
	for _, t := range i.trackedInputs() {
		if t.informer != nil {
			synced = append(synced, t.informer.HasSynced)
		}
	}
	if i.Grants != nil {
		synced = append(synced, i.Grants.HasSynced)
	}
	if i.DigestKeySecret != nil {
		synced = append(synced, i.DigestKeySecret.Informer().HasSynced)
	}
	if i.LiveProfiles != nil && i.LivePods != nil {
		synced = append(synced, i.LiveProfiles.Informer().HasSynced, i.LivePods.Informer().HasSynced)
	}
	return synced
}

// sessionKeysOf returns the keys of the GameSessions that reference the
// profile ("namespace/name"), and no other. It reads only the index: the keys
// are what the queue needs, so no object is even fetched.
func (c *caches) sessionKeysOf(profileKey string) []string {
	keys, err := c.sessionIndexer.IndexKeys(profileRefIndex, profileKey)
	if err != nil {
		// Only a missing index fails, and NewController adds it.
		c.logger.Error(err, "Looking up the GameSessions of a profile", "profile", profileKey)
		return nil
	}
	return keys
}

// trackedInput is a kind of referenced input and its informer, nil for a
// kind not tracked.
type trackedInput struct {
	kind     inputKind
	informer cache.SharedIndexInformer
}

// trackedInputs are the kinds of referenced input (inputs.go), in the order
// of caches.inputs. A new kind is one line here.
func (i Informers) trackedInputs() []trackedInput {
	return []trackedInput{
		{secretKind{keys: i.SecretDigestKeys.fingerprints()}, informerOrNil(i.Secrets)},
		{configMapKind{}, informerOrNil(i.SessionConfigs)},
	}
}

// inputs returns the kinds of referenced input, each with the cache of its
// informer when one is given.
func (i Informers) inputs() []input {
	var inputs []input
	for _, t := range i.trackedInputs() {
		in := input{inputKind: t.kind, index: inputIndex(t.kind)}
		if t.informer != nil {
			in.cache = t.informer.GetIndexer()
		}
		inputs = append(inputs, in)
	}
	return inputs
}

// informerOrNil is the informer of a typed informer, nil for none: an
// optional informer is a nil interface.
func informerOrNil(typed interface {
	Informer() cache.SharedIndexInformer
}) cache.SharedIndexInformer {
	if typed == nil {
		return nil
	}
	return typed.Informer()
}
