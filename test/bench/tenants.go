package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/example/gamesession-controller/internal/manifests"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
)

// The tenants scenario: one profile of a platform namespace shared by
// sessions of many tenant namespaces, each permitted by a ReferenceGrant of
// its own. An edit of the profile costs one revision per namespace (each
// tenant's pods mount a copy in their namespace, and the platform keeps its
// own) and one Deployment write per session, and rolls them all as one
// fan-out. It runs after the other scenarios: the ReferenceGrant CRD (the
// stand-in test/tenancy uses) is installed only then, so the controllers
// before it run without a grant informer, as in a cluster without Gateway
// API.

const (
	platformNS     = "platform"
	tenantProfile  = "arena-shared"
	tenantNSPrefix = "tenant-"
)

var referenceGrantsV1 = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "referencegrants"}

type tenantsRound struct {
	rolled  time.Duration // edit -> the last tenant Deployment with the new hash
	drained time.Duration // edit -> the controller idle again
	req     requestDelta
	ceiling ceilingRound // the paired plain update loop over as many Deployments
}

type tenantsResult struct {
	tenants, sessions int
	rounds            []tenantsRound
}

// tenantsSeries sets the scenario up and measures its fan-out rounds, each
// paired with a ceiling round of as many Deployments.
func (e *env) tenantsSeries(ctx context.Context, tenants, sessions int) (*tenantsResult, error) {
	res := &tenantsResult{tenants: tenants, sessions: sessions}
	crd := filepath.Join(e.root, "test", "tenancy", "testdata", "referencegrants.yaml")
	if err := manifests.InstallCRDs(ctx, e.adminCfg, crd); err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(e.adminCfg)
	if err != nil {
		return nil, err
	}
	namespaces := []string{platformNS}
	for i := range tenants {
		namespaces = append(namespaces, fmt.Sprintf("%s%02d", tenantNSPrefix, i))
	}
	for _, ns := range namespaces {
		if _, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	profile := e.newProfile(tenantProfile)
	profile.Namespace = platformNS
	created, err := e.admin.CoreV1().ConfigMaps(platformNS).Create(ctx, profile, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	h := &hotProfile{size: sessions, cm: created, hash: controller.ProfileHash(created)}
	tenantNamespaces := namespaces[1:]
	for _, ns := range tenantNamespaces {
		if _, err := dyn.Resource(referenceGrantsV1).Namespace(platformNS).Create(ctx, tenantGrant(ns), metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	logf("tenants: %d sessions in %d namespaces on %s/%s, one ReferenceGrant each", sessions, tenants, platformNS, tenantProfile)
	if err := parallel(ctx, sessions, createWorkers, func(ctx context.Context, i int) error {
		ns := tenantNamespaces[i%tenants]
		s := newSession(fmt.Sprintf("t-%05d", i), platformNS+"/"+tenantProfile, e.cfg.template)
		s.Namespace = ns
		_, err := e.games.GamesV1().GameSessions(ns).Create(ctx, s, metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, err
	}

	p, _, err := e.coldStart(ctx, "tenants", "--profile-change-delay=0")
	if err != nil {
		return nil, err
	}
	defer func() { _ = e.stopController(p) }()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if _, err := e.tracker.awaitIn(wctx, tenantNamespaces, h.hash, sessions); err != nil {
		return nil, fmt.Errorf("tenants' initial rollout: %w", err)
	}
	if _, _, err := p.waitDrained(wctx, func(ctlState) bool { return true }); err != nil {
		return nil, err
	}
	time.Sleep(quietPeriod)

	for round := range e.cfg.rounds {
		var r tenantsRound
		// In alternating order, as the other pairs.
		if round%2 == 1 {
			if r.ceiling, err = e.ceiling(ctx, sessions, ceilingPut); err != nil {
				return nil, err
			}
		}
		if err := e.tenantsFanOut(ctx, p, h, tenantNamespaces, &r); err != nil {
			return nil, err
		}
		if round%2 == 0 {
			if r.ceiling, err = e.ceiling(ctx, sessions, ceilingPut); err != nil {
				return nil, err
			}
		}
		res.rounds = append(res.rounds, r)
	}
	return res, nil
}

// tenantsFanOut edits the platform's profile and measures until every tenant
// Deployment carries the new hash, then until the controller is idle.
func (e *env) tenantsFanOut(ctx context.Context, p *ctlProc, h *hotProfile, namespaces []string, r *tenantsRound) error {
	before, err := e.snapshot(ctx, p)
	if err != nil {
		return err
	}
	ss0, err := p.scrape(ctx)
	if err != nil {
		return err
	}
	st0 := readState(ss0)
	cm := h.cm.DeepCopy()
	cm.Data = e.profileData()
	start := time.Now()
	updated, err := e.admin.CoreV1().ConfigMaps(platformNS).Update(ctx, cm, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	h.cm, h.hash = updated, controller.ProfileHash(updated)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	rolledAt, err := e.tracker.awaitIn(wctx, namespaces, h.hash, h.size)
	if err != nil {
		return fmt.Errorf("tenants' fan-out: %w", err)
	}
	drainedAt, _, err := p.waitDrained(wctx, func(s ctlState) bool { return s.fanOuts > st0.fanOuts })
	if err != nil {
		return err
	}
	time.Sleep(quietPeriod)
	after, err := e.snapshot(ctx, p)
	if err != nil {
		return err
	}
	r.rolled, r.drained, r.req = rolledAt.Sub(start), drainedAt.Sub(start), diffSnapshots(before, after)
	logf("tenants' fan-out %d in %d namespaces: rolled %s, drained %s; requests %v", h.size, len(namespaces),
		r.rolled.Round(time.Millisecond), r.drained.Round(time.Millisecond), r.req.lines())
	return nil
}

// tenantGrant lets the GameSessions of namespace use the platform's profile.
func tenantGrant(namespace string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": referenceGrantsV1.GroupVersion().String(),
		"kind":       "ReferenceGrant",
		"metadata":   map[string]interface{}{"name": "sessions-of-" + namespace, "namespace": platformNS},
		"spec": map[string]interface{}{
			"from": []interface{}{map[string]interface{}{"group": gamesv1.SchemeGroupVersion.Group, "kind": "GameSession", "namespace": namespace}},
			"to":   []interface{}{map[string]interface{}{"group": "", "kind": "ConfigMap", "name": tenantProfile}},
		},
	}}
}

func (r *results) writeTenantsRows(w func(string, ...any)) {
	t := r.tenants
	if t == nil || len(t.rounds) == 0 {
		return
	}
	var rolled, ceilings, ratios, drained []float64
	for _, round := range t.rounds {
		rolled = append(rolled, round.rolled.Seconds())
		drained = append(drained, round.drained.Seconds())
		ceilings = append(ceilings, round.ceiling.rolled.Seconds())
		ratios = append(ratios, round.rolled.Seconds()/round.ceiling.rolled.Seconds())
	}
	_, rolledMed, _ := spread(rolled)
	_, drainedMed, _ := spread(drained)
	_, ceilingMed, _ := spread(ceilings)
	lo, med, hi := spread(ratios)
	w("| 9 | Tenants: one profile of namespace `%s` shared by %s sessions in %d namespaces, each by a ReferenceGrant; `--profile-change-delay=0`: edit → last Deployment watched with the new hash (→ controller idle) | %s | %.2f s (%.2f s) | ceiling (JSON update loop) %.2f s | **%.2fx** (%.2f–%.2f) | as the one-namespace fan-out of this size | — |\n",
		platformNS, num(t.sessions), t.tenants, num(t.sessions), rolledMed, drainedMed, ceilingMed, med, lo, hi)
	d := t.rounds[0].req
	revisions := d.count("POST", resConfigMaps)
	ok := true
	for _, round := range t.rounds {
		ok = ok && round.req.deploymentWrites() == float64(t.sessions) && readsOf(round.req) == 0 &&
			round.req.count("POST", resConfigMaps) == float64(t.tenants+1)
	}
	w("| 9 | Tenants: API requests per profile change (round 1) | %s | %s; %.0f revisions created (%d namespaces and the profile's own) | — | %.2f Deployment writes/session | one revision per namespace, 1 Deployment write per session, 0 GET, 0 LIST | %s |\n",
		num(t.sessions), requestSummary(d, t.sessions), revisions, t.tenants, d.deploymentWrites()/float64(t.sessions), yes(ok))
}
