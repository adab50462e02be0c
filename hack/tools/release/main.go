// Command release writes a release bundle of gamesession-controller into one
// folder: the CRD, an all-in-one install manifest (the kustomize install of
// artifacts/ with the release image), the Helm chart package (versioned, with
// the release image), the Prometheus rules, the Argo CD health checks of
// GameSessions and ProfileRollouts and, if given, the image archive, plus
// SHA256SUMS.
//
// It is a module of its own, with Helm and kustomize pinned, so that neither
// enters the controller's module graph. `make release` runs it.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// semver is what Helm accepts as a chart version (SemVer 2, no leading v).
var semver = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

func main() {
	root := flag.String("root", "../../..", "The repository's root.")
	out := flag.String("out", "", "The folder to write the bundle into (created; must not exist or be empty).")
	version := flag.String("version", "", "The release version, SemVer with an optional leading v, e.g. v1.2.0 or v0.0.0-42-gabc1234.")
	imageRepo := flag.String("image-repository", "gamesession-controller", "The image repository the release deploys, e.g. ghcr.io/example/gamesession-controller.")
	imageArchive := flag.String("image-archive", "", "An OCI archive of the image to include (from `make image`). Empty: none.")
	flag.Parse()
	if err := run(*root, *out, *version, *imageRepo, *imageArchive); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(root, out, version, imageRepo, imageArchive string) error {
	chartVersion := strings.TrimPrefix(version, "v")
	if !semver.MatchString(chartVersion) {
		return fmt.Errorf("version %q is not SemVer (MAJOR.MINOR.PATCH[-PRERELEASE])", version)
	}
	if out == "" {
		return fmt.Errorf("-out is required")
	}
	if entries, err := os.ReadDir(out); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s exists and is not empty", out)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	// The image tag is the version as given: `make image` tags it so.
	image := imageRepo + ":" + version

	// Every CRD of the project in one file: GameSession and ProfileRollout.
	crds, err := filepath.Glob(filepath.Join(root, "artifacts", "crd", "*.yaml"))
	if err != nil {
		return err
	}
	if err := concatFiles(crds, filepath.Join(out, "gamesession-crd.yaml")); err != nil {
		return err
	}
	install, err := installManifest(filepath.Join(root, "artifacts"), imageRepo, version)
	if err != nil {
		return err
	}
	header := fmt.Sprintf("# gamesession-controller %s: CRD, namespace, RBAC and the controller (image %s).\n"+
		"#   kubectl apply --server-side -f install.yaml\n", version, image)
	if err := os.WriteFile(filepath.Join(out, "install.yaml"), append([]byte(header), install...), 0o644); err != nil {
		return err
	}
	chartDir := filepath.Join(root, "charts", "gamesession-controller")
	packaged, err := packageChart(chartDir, out, chartVersion, version, imageRepo)
	if err != nil {
		return err
	}
	for src, dst := range map[string]string{
		filepath.Join(chartDir, "files", "prometheus-rules.yaml"):            "prometheus-rules.yaml",
		filepath.Join(chartDir, "files", "argocd-health.lua"):                "argocd-health.lua",
		filepath.Join(chartDir, "files", "argocd-health-profilerollout.lua"): "argocd-health-profilerollout.lua",
	} {
		if err := copyFile(src, filepath.Join(out, dst)); err != nil {
			return err
		}
	}
	if imageArchive != "" {
		if err := copyFile(imageArchive, filepath.Join(out, "gamesession-controller-image.oci.tar")); err != nil {
			return err
		}
	}
	if err := writeChecksums(out); err != nil {
		return err
	}
	fmt.Printf("release %s in %s:\n", version, out)
	fmt.Printf("  kubectl apply --server-side -f %s\n", filepath.Join(out, "install.yaml"))
	fmt.Printf("  helm install gamesession-controller %s --namespace gamesession-system --create-namespace\n", packaged)
	return nil
}

// installManifest is `kustomize build artifacts/` with the release image,
// as `kustomize edit set image` would set it.
func installManifest(dir, imageRepo, tag string) ([]byte, error) {
	// Build an overlay in memory over the real folder, so that artifacts/
	// itself stays as it is.
	fs := filesys.MakeFsOnDisk()
	overlay, err := os.MkdirTemp("", "release-overlay-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(overlay)
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	base, err := filepath.Rel(overlay, abs)
	if err != nil {
		return nil, err
	}
	kustomization := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- %s\nimages:\n- name: gamesession-controller\n  newName: %s\n  newTag: %s\n",
		base, imageRepo, tag)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		return nil, err
	}
	opts := krusty.MakeDefaultOptions()
	opts.LoadRestrictions = types.LoadRestrictionsNone // the overlay lives outside the base's folder
	resources, err := krusty.MakeKustomizer(opts).Run(fs, overlay)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return resources.AsYaml()
}

// packageChart writes the chart as a .tgz, as `helm package --version
// --app-version` does, with the release image repository as its default.
func packageChart(dir, out, chartVersion, appVersion, imageRepo string) (string, error) {
	c, err := loader.LoadDir(dir)
	if err != nil {
		return "", err
	}
	c.Metadata.Version = chartVersion
	c.Metadata.AppVersion = appVersion
	if err := setImageRepository(c, imageRepo); err != nil {
		return "", err
	}
	if err := c.Validate(); err != nil {
		return "", err
	}
	return chartutil.Save(c, out)
}

// setImageRepository rewrites image.repository in the packaged values.yaml,
// keeping the file's comments: the only line of that key under image:.
func setImageRepository(c *chart.Chart, imageRepo string) error {
	for _, f := range c.Raw {
		if f.Name != chartutil.ValuesfileName {
			continue
		}
		lines := strings.Split(string(f.Data), "\n")
		inImage := false
		for i, line := range lines {
			switch {
			case line == "image:":
				inImage = true
			case inImage && strings.HasPrefix(line, "  repository:"):
				lines[i] = "  repository: " + imageRepo
				f.Data = []byte(strings.Join(lines, "\n"))
				values, err := chartutil.ReadValues(f.Data)
				if err != nil {
					return err
				}
				c.Values = values
				return nil
			case inImage && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "#") && line != "":
				inImage = false
			}
		}
	}
	return fmt.Errorf("no image.repository line in the chart's values.yaml")
}

// concatFiles writes the YAML files srcs into dst, one document after another.
func concatFiles(srcs []string, dst string) error {
	var all []byte
	for i, src := range srcs {
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if i > 0 {
			all = append(all, []byte("---\n")...)
		}
		all = append(all, data...)
	}
	return os.WriteFile(dst, all, 0o644)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	outFile, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(outFile, in); err != nil {
		outFile.Close()
		return err
	}
	return outFile.Close()
}

// writeChecksums writes SHA256SUMS, in the format `sha256sum -c` reads.
func writeChecksums(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var lines []string
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		lines = append(lines, hex.EncodeToString(sum[:])+"  "+e.Name())
	}
	sort.Strings(lines)
	return os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}
