package controller

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// The phase list and the reason tables of README.md and docs/ are what users
// and GitOps tools match on. These tests take what the controller says from
// its code (the API's constants, summarize, rolloutStatus) and check that
// every copy lists exactly that.

// readDoc reads a file of the repository, by its path from the root.
func readDoc(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile("../../" + path)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// apiConstants returns the values of the string constants of a file of
// pkg/apis/games/v1 that keep accepts, by name and declared type ("" if
// none).
func apiConstants(t *testing.T, file string, keep func(name, typ string) bool) sets.Set[string] {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../apis/games/v1/"+file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	values := sets.New[string]()
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			typ := ""
			if ident, ok := vs.Type.(*ast.Ident); ok {
				typ = ident.Name
			}
			for i, name := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING || !keep(name.Name, typ) {
					continue
				}
				value, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				values.Insert(value)
			}
		}
	}
	return values
}

func isReason(name, _ string) bool { return strings.HasPrefix(name, "Reason") }

// tableRows returns the cells of the rows of the table whose header row
// begins with header, without the header and its separator row.
func tableRows(t *testing.T, doc, path, header string) [][]string {
	t.Helper()
	lines := strings.Split(doc, "\n")
	for i, line := range lines {
		if !strings.HasPrefix(line, header) {
			continue
		}
		var rows [][]string
		for _, row := range lines[i+2:] {
			if !strings.HasPrefix(row, "|") {
				break
			}
			cells := strings.Split(strings.Trim(row, "|"), "|")
			for j := range cells {
				cells[j] = strings.TrimSpace(cells[j])
			}
			rows = append(rows, cells)
		}
		return rows
	}
	t.Fatalf("%s has no table headed %q", path, header)
	return nil
}

var tickedName = regexp.MustCompile("`([A-Z][A-Za-z]*)`")

// ticked returns the names in backticks in s.
func ticked(s string) sets.Set[string] {
	names := sets.New[string]()
	for _, m := range tickedName.FindAllStringSubmatch(s, -1) {
		names.Insert(m[1])
	}
	return names
}

// tickedAfter returns the names in backticks in the parenthesised list that
// follows marker in s; none if s has no marker.
func tickedAfter(s, marker string) sets.Set[string] {
	_, rest, found := strings.Cut(s, marker+" (")
	if !found {
		return sets.New[string]()
	}
	list, _, _ := strings.Cut(rest, ")")
	return ticked(list)
}

// withoutAsides returns s without its parenthesised asides, which may name
// other conditions.
func withoutAsides(s string) string {
	var b strings.Builder
	depth := 0
	for _, r := range s {
		switch {
		case r == '(':
			depth++
		case r == ')' && depth > 0:
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func expectListed(t *testing.T, where string, listed, want sets.Set[string]) {
	t.Helper()
	if !listed.Equal(want) {
		t.Errorf("%s lists %v, want %v: missing %v, extra %v", where, sets.List(listed), sets.List(want),
			sets.List(want.Difference(listed)), sets.List(listed.Difference(want)))
	}
}

func TestDocsListEveryRolloutPhase(t *testing.T) {
	phases := apiConstants(t, "profilerollout_types.go", func(_, typ string) bool { return typ == "RolloutPhase" })
	list := regexp.MustCompile("(?s)(?:the phase|`PHASE`) \\((`[^)]*)\\)")
	for _, path := range []string{"README.md", "docs/rollouts.md"} {
		lists := list.FindAllStringSubmatch(readDoc(t, path), -1)
		if len(lists) == 0 {
			t.Errorf("%s has no list of the phases", path)
		}
		for _, m := range lists {
			expectListed(t, path+"'s phases", ticked(m[1]), phases)
		}
	}
}

// The reasons a session's summary conditions, Stalled and Reconciling,
// carry, as summarize sets them, are those the kstatus tables list; and the
// reasons of ProfileUpToDate=False are those the reason tables list.
func TestDocsListEverySessionReason(t *testing.T) {
	cond := func(conditionType string, status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: conditionType, Status: status, Reason: reason}
	}
	resolved := cond(gamesv1.ConditionProfileResolved, metav1.ConditionTrue, gamesv1.ReasonProfileResolved)
	ready := cond(gamesv1.ConditionReady, metav1.ConditionTrue, gamesv1.ReasonDeploymentReady)
	current := cond(gamesv1.ConditionProfileUpToDate, metav1.ConditionTrue, gamesv1.ReasonRevisionCurrent)

	// Each reason on the condition the sync sets it on, the others as they
	// are then.
	readyReasons := sets.New(gamesv1.ReasonDeploymentProgressing, gamesv1.ReasonDeploymentPaused,
		gamesv1.ReasonDeploymentDeleting, gamesv1.ReasonDeploymentNotControlled, gamesv1.ReasonDeploymentInvalid,
		gamesv1.ReasonProgressDeadlineExceeded, gamesv1.ReasonLiveProfileNotControlled, gamesv1.ReasonLiveProfileDeleting)
	upToDateReasons := sets.New(gamesv1.ReasonRevisionPending, gamesv1.ReasonRevisionUnavailable,
		gamesv1.ReasonWaitingForTurn, gamesv1.ReasonRolloutPaused, gamesv1.ReasonRolloutHalted,
		gamesv1.ReasonRolloutBlocked, gamesv1.ReasonSessionBusy, gamesv1.ReasonOutsideWindow,
		gamesv1.ReasonWaitingForClusterBudget, gamesv1.ReasonDeliveryPending, gamesv1.ReasonDeliveryFailed,
		gamesv1.ReasonLiveProfileNotControlled, gamesv1.ReasonLiveProfileDeleting)
	resolvedReasons := sets.New(gamesv1.ReasonProfileNotFound, gamesv1.ReasonReferenceNotPermitted)
	var cases [][]metav1.Condition
	for _, reason := range sets.List(readyReasons) {
		cases = append(cases, []metav1.Condition{resolved, cond(gamesv1.ConditionReady, metav1.ConditionFalse, reason), current})
	}
	for _, reason := range sets.List(upToDateReasons) {
		cases = append(cases, []metav1.Condition{resolved, ready, cond(gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, reason)})
	}
	for _, reason := range sets.List(resolvedReasons) {
		cases = append(cases, []metav1.Condition{cond(gamesv1.ConditionProfileResolved, metav1.ConditionFalse, reason),
			cond(gamesv1.ConditionReady, metav1.ConditionFalse, gamesv1.ReasonWaitingForProfile)})
	}
	// Reasons no summary carries: those of True conditions; WaitingForProfile,
	// set only with ProfileResolved=False, whose reason the summary takes;
	// ContainerConflict, no longer reported.
	unsummarised := sets.New(gamesv1.ReasonProfileResolved, gamesv1.ReasonDeploymentReady, gamesv1.ReasonRevisionCurrent,
		gamesv1.ReasonWaitingForProfile, gamesv1.ReasonContainerConflict)
	for _, reason := range sets.List(apiConstants(t, "types.go", isReason)) {
		if !readyReasons.Union(upToDateReasons).Union(resolvedReasons).Union(unsummarised).Has(reason) {
			t.Errorf("reason %s is in none of this test's cases: add it, and to the docs' tables", reason)
		}
	}

	summaries := map[string]sets.Set[string]{gamesv1.ConditionStalled: sets.New[string](), gamesv1.ConditionReconciling: sets.New[string]()}
	for _, conditions := range cases {
		session := newSession(testNamespace, "arena-1", "classic")
		session.Status.Conditions = conditions
		s := newSessionStatus(session)
		s.summarize()
		for conditionType, reasons := range summaries {
			if c := meta.FindStatusCondition(s.status.Conditions, conditionType); c != nil {
				reasons.Insert(c.Reason)
			}
		}
	}

	readme := readDoc(t, "README.md")
	for _, row := range tableRows(t, readme, "README.md", "| condition | when | kstatus | reasons |") {
		for conditionType, reasons := range summaries {
			if row[0] == "`"+conditionType+"`" {
				expectListed(t, "README.md's kstatus table, "+conditionType, ticked(row[3]), reasons)
			}
		}
	}
	operations := readDoc(t, "docs/operations.md")
	gitops := tableRows(t, operations, "docs/operations.md", "| state | conditions | kstatus `Compute` | Argo CD (chart's Lua check) |")
	for conditionType, reasons := range summaries {
		listed := sets.New[string]()
		for _, row := range gitops {
			listed = listed.Union(tickedAfter(row[1], "`"+conditionType+"=True`"))
		}
		expectListed(t, "docs/operations.md's GitOps health table of sessions, "+conditionType, listed, reasons)
	}

	for _, row := range tableRows(t, readme, "README.md", "| condition | False reasons | what to do |") {
		if row[0] == "`"+gamesv1.ConditionProfileUpToDate+"`" {
			expectListed(t, "README.md's conditions table, ProfileUpToDate", ticked(withoutAsides(row[1])), upToDateReasons)
		}
	}
	rollouts := readDoc(t, "docs/rollouts.md")
	listed := sets.New[string]()
	for _, row := range tableRows(t, rollouts, "docs/rollouts.md", "| reason | means |") {
		reason := sets.List(ticked(row[0]))[0]
		listed.Insert(reason)
		if said, stalls := strings.HasSuffix(row[1], "Stalled"), summaries[gamesv1.ConditionStalled].Has(reason); said != stalls {
			t.Errorf("docs/rollouts.md's table of what a session says: %s says Stalled %v, want %v", reason, said, stalls)
		}
	}
	expectListed(t, "docs/rollouts.md's table of what a session says", listed, upToDateReasons)
	listed = sets.New[string]()
	for _, row := range tableRows(t, operations, "docs/operations.md", "| Reason (session) | Means | Do |") {
		listed = listed.Union(ticked(row[0]))
	}
	expectListed(t, "docs/operations.md's table of session reasons", listed, upToDateReasons.Clone().Insert(gamesv1.ReasonRevisionCurrent))
}

// The reasons of a ProfileRollout's Complete=False, Stalled and Reconciling,
// as rolloutStatus sets them, are those the docs' tables list.
func TestDocsListEveryProfileRolloutReason(t *testing.T) {
	profile := newProfile(testNamespace, "classic", classicData)
	hash := ProfileHash(profile)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	created := revisionState{available: true, reason: gamesv1.ReasonRevisionCreated}
	plans := map[string]profilePlan{
		"canary":  {plan: rollout.Plan{Phase: rollout.PhaseCanary, Total: 4, Moved: 1, Rolling: 1, Canary: 1}, revision: created},
		"rolling": {plan: rollout.Plan{Phase: rollout.PhaseRolling, Total: 4, Moved: 2, Ready: 1, Rolling: 1, Admitted: []string{"c"}}},
		"paused":  {plan: rollout.Plan{Phase: rollout.PhasePaused, Total: 4}},
		"halted": {plan: rollout.Plan{Phase: rollout.PhaseHalted, Total: 4, Moved: 1, Rolling: 1, Failed: 1},
			memory: rollout.Memory{Halted: true}},
		"outside its window": {plan: rollout.Plan{Phase: rollout.PhaseWaiting, Total: 4, Resumes: now.Add(time.Hour)},
			window: "02:00-06:00"},
		"held up": {plan: rollout.Plan{Phase: rollout.PhaseRolling, Total: 4, Moved: 1, Rolling: 1, Stuck: true,
			Blocked: []rollout.BlockedMember{{Name: "a", Reason: gamesv1.ReasonDeploymentPaused}}}},
		"waiting for busy sessions": {plan: rollout.Plan{Phase: rollout.PhaseRolling, Total: 4, Moved: 3, Ready: 3, Deferred: 1}},
		"revision refused": {plan: rollout.Plan{Phase: rollout.PhaseRolling, Total: 4},
			revision: revisionState{reason: gamesv1.ReasonRevisionCreateFailed, message: "exceeded quota"}},
		"revision name taken": {plan: rollout.Plan{Phase: rollout.PhaseRolling, Total: 4},
			revision: revisionState{reason: gamesv1.ReasonRevisionNameTaken, message: "not a revision"}},
		"complete": {plan: rollout.Plan{Phase: rollout.PhaseComplete, Total: 4, Moved: 4, Ready: 4, Settled: true}},
	}
	notComplete, stalled, reconciling, seen := sets.New[string](), sets.New[string](), sets.New[string](), sets.New[string]()
	for name, pp := range plans {
		pp.hash = hash
		s := rolloutStatus(profile, &pp, nil, metav1.NewTime(now))
		for _, c := range s.Conditions {
			seen.Insert(c.Reason)
			switch {
			case c.Type == gamesv1.ConditionComplete && c.Status == metav1.ConditionFalse:
				notComplete.Insert(c.Reason)
			case c.Type == gamesv1.ConditionStalled:
				stalled.Insert(c.Reason)
			case c.Type == gamesv1.ConditionReconciling:
				reconciling.Insert(c.Reason)
			}
		}
		if name == "outside its window" && s.Phase != gamesv1.RolloutPhaseWaiting {
			t.Errorf("a plan outside its window: phase %s, want %s", s.Phase, gamesv1.RolloutPhaseWaiting)
		}
	}
	for _, reason := range sets.List(apiConstants(t, "profilerollout_types.go", isReason).Difference(seen)) {
		t.Errorf("reason %s is in none of this test's cases: add one, and the reason to the docs' tables", reason)
	}

	rollouts := readDoc(t, "docs/rollouts.md")
	for _, row := range tableRows(t, rollouts, "docs/rollouts.md", "| condition | status, reason |") {
		switch row[0] {
		case "`" + gamesv1.ConditionComplete + "`":
			_, falseReasons, _ := strings.Cut(row[1], "`False` with")
			expectListed(t, "docs/rollouts.md's ProfileRollout conditions, Complete=False", ticked(withoutAsides(falseReasons)), notComplete)
		case "`" + gamesv1.ConditionStalled + "`":
			expectListed(t, "docs/rollouts.md's ProfileRollout conditions, Stalled", ticked(row[1]), stalled)
		case "`" + gamesv1.ConditionReconciling + "`":
			expectListed(t, "docs/rollouts.md's ProfileRollout conditions, Reconciling", ticked(row[1]), reconciling)
		}
	}
	operations := readDoc(t, "docs/operations.md")
	listedStalled, listedReconciling := sets.New[string](), sets.New[string]()
	for _, row := range tableRows(t, operations, "docs/operations.md", "| state | conditions | kstatus `Compute` | Argo CD (`argocd-health-profilerollout.lua`) |") {
		listedStalled = listedStalled.Union(tickedAfter(row[1], "`Stalled=True`"))
		listedReconciling = listedReconciling.Union(tickedAfter(row[1], "`Reconciling=True`"))
	}
	expectListed(t, "docs/operations.md's GitOps health table of ProfileRollouts, Stalled", listedStalled, stalled)
	expectListed(t, "docs/operations.md's GitOps health table of ProfileRollouts, Reconciling", listedReconciling, reconciling)
}
