package controller

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// The shape the profileRef index is for: one busy namespace of 7,340 sessions
// over 500 profiles, and other tenants using the same profile names, which a
// lookup must tell apart.
const (
	benchNamespace         = "arena"
	benchSessions          = 7340
	benchProfiles          = 500
	benchOtherNamespaces   = 4
	benchSessionsPerTenant = 250
	benchTenantProfiles    = 50
)

func benchProfileName(i int) string { return fmt.Sprintf("profile-%03d", i) }

// newBenchIndexer returns a GameSession indexer with the controller's index,
// filled, and the profiles of benchNamespace.
func newBenchIndexer(tb testing.TB) (cache.Indexer, []string) {
	tb.Helper()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{profileRefIndex: profileRefIndexFunc})
	add := func(namespace string, i, profiles int) {
		s := &gamesv1.GameSession{}
		s.Namespace, s.Name = namespace, fmt.Sprintf("session-%05d", i)
		s.Spec.ProfileRef = benchProfileName(i % profiles)
		if err := indexer.Add(s); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range benchSessions {
		add(benchNamespace, i, benchProfiles)
	}
	for n := range benchOtherNamespaces {
		for i := range benchSessionsPerTenant {
			add(fmt.Sprintf("tenant-%d", n), i, benchTenantProfiles)
		}
	}
	profiles := make([]string, benchProfiles)
	for i := range profiles {
		profiles[i] = benchProfileName(i)
	}
	return indexer, profiles
}

// lookupByIndex is what enqueueSessionsForProfile does.
func lookupByIndex(indexer cache.Indexer, namespace, profile string) []string {
	keys, err := indexer.IndexKeys(profileRefIndex, profileKey(namespace, profile))
	if err != nil {
		panic(err)
	}
	return keys
}

// lookupByScan is what a naive ConfigMap-to-sessions map function does: look
// at every cached session.
func lookupByScan(indexer cache.Indexer, namespace, profile string) []string {
	var keys []string
	for _, obj := range indexer.List() {
		s := obj.(*gamesv1.GameSession)
		if s.Namespace == namespace && s.Spec.ProfileRef == profile {
			keys = append(keys, s.Namespace+"/"+s.Name)
		}
	}
	return keys
}

type lookupFunc func(indexer cache.Indexer, namespace, profile string) []string

// benchmarkLookup looks up each profile in turn, so no single index bucket
// stays hot in the CPU cache.
func benchmarkLookup(b *testing.B, indexer cache.Indexer, profiles []string, lookup lookupFunc) {
	b.ReportAllocs()
	found, i := 0, 0
	for b.Loop() {
		found += len(lookup(indexer, benchNamespace, profiles[i%len(profiles)]))
		i++
	}
	if found == 0 {
		b.Fatal("no session found")
	}
}

func TestBenchLookupsAgree(t *testing.T) {
	indexer, profiles := newBenchIndexer(t)
	total := 0
	for _, p := range profiles {
		byIndex, byScan := lookupByIndex(indexer, benchNamespace, p), lookupByScan(indexer, benchNamespace, p)
		slices.Sort(byIndex)
		slices.Sort(byScan)
		if !slices.Equal(byIndex, byScan) {
			t.Fatalf("%s: index found %d sessions, scan %d", p, len(byIndex), len(byScan))
		}
		total += len(byIndex)
	}
	// Every session of the namespace is found once; no other tenant's.
	if total != benchSessions {
		t.Errorf("found %d sessions over all profiles, want %d", total, benchSessions)
	}
}

func BenchmarkProfileLookup(b *testing.B) {
	indexer, profiles := newBenchIndexer(b)
	b.Run("index", func(b *testing.B) { benchmarkLookup(b, indexer, profiles, lookupByIndex) })
	b.Run("scan", func(b *testing.B) { benchmarkLookup(b, indexer, profiles, lookupByScan) })
}

// BenchmarkProfileLookupRatio times both lookups in the same run and reports
// how many times slower the scan is, so one run gives the ratio. One op looks
// up every profile once each way. (testing.Benchmark cannot do this: called
// inside a benchmark, it waits for the benchmark lock its caller holds.)
func BenchmarkProfileLookupRatio(b *testing.B) {
	indexer, profiles := newBenchIndexer(b)
	var indexTime, scanTime time.Duration
	indexFound, scanFound, lookups := 0, 0, 0
	for b.Loop() {
		// Each way pays for its own garbage: without this, the collection of
		// the scans' garbage would run during, and be charged to, the index
		// lookups.
		runtime.GC()
		start := time.Now()
		for _, p := range profiles {
			indexFound += len(lookupByIndex(indexer, benchNamespace, p))
		}
		indexTime += time.Since(start)
		start = time.Now()
		for _, p := range profiles {
			scanFound += len(lookupByScan(indexer, benchNamespace, p))
		}
		scanTime += time.Since(start)
		lookups += len(profiles)
	}
	if indexFound != scanFound || indexFound == 0 {
		b.Fatalf("index found %d sessions, scan %d", indexFound, scanFound)
	}
	indexNs := float64(indexTime.Nanoseconds()) / float64(lookups)
	scanNs := float64(scanTime.Nanoseconds()) / float64(lookups)
	b.ReportMetric(indexNs, "index-ns/lookup")
	b.ReportMetric(scanNs, "scan-ns/lookup")
	b.ReportMetric(scanNs/indexNs, "scan/index-ratio")
	b.Logf("%d lookups each way: index %.0f ns/lookup, scan %.0f ns/lookup, scan/index %.0fx",
		lookups, indexNs, scanNs, scanNs/indexNs)
}
