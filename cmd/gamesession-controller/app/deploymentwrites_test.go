package app

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
)

func TestDeploymentWritesFor(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	const typesMinor = apiTypesMinor
	cases := []struct {
		mode         string
		major, minor string
		wantPatch    bool
	}{
		{deploymentWritesAuto, "1", fmt.Sprint(typesMinor), false},
		{deploymentWritesAuto, "1", fmt.Sprint(typesMinor-1) + "+", false},
		{deploymentWritesAuto, "1", fmt.Sprint(typesMinor + 1), true},
		{deploymentWritesAuto, "2", "0", true},
		{deploymentWritesAuto, "1", "unknown", true},
		{deploymentWritesUpdate, "1", fmt.Sprint(typesMinor + 1), false},
		{deploymentWritesPatch, "1", fmt.Sprint(typesMinor), true},
	}

	for _, tc := range cases {
		client := fake.NewClientset()
		client.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{Major: tc.major, Minor: tc.minor}
		patch, err := deploymentWritesFor(ctx, tc.mode, client.Discovery())
		if err != nil {
			t.Fatalf("%s against %s.%s: %v", tc.mode, tc.major, tc.minor, err)
		}
		if patch != tc.wantPatch {
			t.Errorf("--deployment-writes=%s against Kubernetes %s.%s (types 1.%d): patch %v, want %v",
				tc.mode, tc.major, tc.minor, typesMinor, patch, tc.wantPatch)
		}
	}
}

// The constant names the API types go.mod builds with: an update of
// k8s.io/api without it would have "auto" erase the fields of the newer types
// on a server as new as them, or update against an older server's fields.
func TestAPITypesMinorMatchesGoMod(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require"))
		if len(fields) < 2 || fields[0] != "k8s.io/api" {
			continue
		}
		minor, ok := moduleMinor(fields[1])
		if !ok || minor != apiTypesMinor {
			t.Errorf("go.mod requires k8s.io/api %s; apiTypesMinor is %d: set it to that version's minor", fields[1], apiTypesMinor)
		}
		return
	}
	t.Fatal("go.mod does not require k8s.io/api")
}
