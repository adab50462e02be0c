package deploy

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestReleaseBundle runs the release tool as `make release` does and checks
// the bundle installs what the repository's own installs do, with the
// release's image: install.yaml is the kustomize build of artifacts/, the
// chart package renders as the chart does, and SHA256SUMS covers the files.
func TestReleaseBundle(t *testing.T) {
	const (
		version = "v1.2.3-rc.1"
		repo    = "registry.example.com/games/gamesession-controller"
		image   = repo + ":" + version
	)
	out := filepath.Join(t.TempDir(), "release")
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", ".", "-root", root, "-out", out, "-version", version, "-image-repository", repo)
	cmd.Dir = filepath.Join(root, "hack", "tools", "release")
	if output, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("release tool: %v\n%s", err, output)
	}

	// Every file is listed with its checksum, and no other.
	sums, err := os.Open(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	defer sums.Close()
	listed := map[string]bool{}
	for scanner := bufio.NewScanner(sums); scanner.Scan(); {
		sum, name, _ := strings.Cut(scanner.Text(), "  ")
		data, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != sum {
			t.Errorf("SHA256SUMS: %s does not match", name)
		}
		listed[name] = true
	}
	chartPackage := "gamesession-controller-1.2.3-rc.1.tgz"
	for _, name := range []string{"gamesession-crd.yaml", "install.yaml", chartPackage, "prometheus-rules.yaml", "argocd-health.lua", "argocd-health-profilerollout.lua"} {
		if !listed[name] {
			t.Errorf("the bundle lacks %s (SHA256SUMS lists %v)", name, listed)
		}
	}

	// install.yaml: the kustomize install, with the release's image.
	install, err := os.ReadFile(filepath.Join(out, "install.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := kustomize(t, artifactsDir)
	setImage(t, want, image)
	compareObjects(t, "install.yaml", decode(t, string(install)), "kustomize build artifacts/", want)

	// The chart package: the chart, versioned, with the release's image
	// repository as its default and the version as its default tag.
	packaged, err := loader.Load(filepath.Join(out, chartPackage))
	if err != nil {
		t.Fatal(err)
	}
	if packaged.Metadata.Version != "1.2.3-rc.1" || packaged.Metadata.AppVersion != version {
		t.Errorf("chart version %q, appVersion %q; want 1.2.3-rc.1 and %s", packaged.Metadata.Version, packaged.Metadata.AppVersion, version)
	}
	installAction := action.NewInstall(&action.Configuration{Log: t.Logf})
	installAction.DryRun, installAction.ClientOnly, installAction.Replace, installAction.IncludeCRDs = true, true, true, true
	installAction.ReleaseName, installAction.Namespace = "gamesession-controller", systemNamespace
	rel, err := installAction.Run(packaged, nil)
	if err != nil {
		t.Fatalf("rendering the packaged chart: %v", err)
	}
	wantChart := render(t, systemNamespace, clusterValues)
	setImage(t, wantChart, image)
	compareObjects(t, "the packaged chart", decode(t, rel.Manifest), "the chart with the release image", wantChart)
}

// setImage sets the image of the controller container in the Deployment of objs.
func setImage(t *testing.T, objs []*unstructured.Unstructured, image string) {
	t.Helper()
	for _, obj := range only(objs, "Deployment") {
		containers, _, err := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
		if err != nil || len(containers) != 1 {
			t.Fatalf("Deployment %s: containers %v (%v), want one", obj.GetName(), containers, err)
		}
		containers[0].(map[string]any)["image"] = image
		if err := unstructured.SetNestedSlice(obj.Object, containers, "spec", "template", "spec", "containers"); err != nil {
			t.Fatal(err)
		}
	}
}
