package testutil

import (
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
)

// RevokeVerb returns rules less one verb of one resource of one API group,
// leaving every other grant as it was: a rule naming several resources or
// verbs is split rather than dropped. The RBAC tests take verbs away one at
// a time to show each needed.
func RevokeVerb(rules []rbacv1.PolicyRule, group, resource, verb string) []rbacv1.PolicyRule {
	var kept []rbacv1.PolicyRule
	for _, rule := range rules {
		if !slices.Contains(rule.APIGroups, group) || !slices.Contains(rule.Resources, resource) || !slices.Contains(rule.Verbs, verb) {
			kept = append(kept, rule)
			continue
		}
		for _, res := range rule.Resources {
			split := *rule.DeepCopy()
			split.Resources = []string{res}
			if res == resource {
				split.Verbs = slices.DeleteFunc(split.Verbs, func(v string) bool { return v == verb })
			}
			if len(split.Verbs) > 0 {
				kept = append(kept, split)
			}
		}
	}
	return kept
}
