package deploy

import (
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
)

// TestHelmLint runs `helm lint` (the SDK's lint package) on the chart in
// both RBAC modes, with the PrometheusRule and with the dashboard: no error
// and no warning.
// Information messages (an icon is recommended) are logged, not failed.
func TestHelmLint(t *testing.T) {
	for name, values := range map[string]map[string]any{
		"cluster":          clusterValues,
		"namespace":        namespaceValues,
		"prometheusRule":   {"prometheusRule": map[string]any{"enabled": true}},
		"grafanaDashboard": {"grafanaDashboard": map[string]any{"enabled": true}},
	} {
		t.Run(name, func(t *testing.T) {
			for _, msg := range lint.All(chartDir, values, systemNamespace, false).Messages {
				if msg.Severity >= support.WarningSev {
					t.Error(msg)
				} else {
					t.Log(msg)
				}
			}
		})
	}

	// The control: lint renders the templates with the values it is given.
	var errs []string
	for _, msg := range lint.All(chartDir, map[string]any{"rbac": map[string]any{"scope": "everywhere"}}, systemNamespace, false).Messages {
		if msg.Severity == support.ErrorSev {
			errs = append(errs, msg.Error())
		}
	}
	if !strings.Contains(strings.Join(errs, "\n"), "scope") {
		t.Errorf("lint with rbac.scope=everywhere reports errors %q, want one about the scope", errs)
	}
}
