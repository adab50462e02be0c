package main

import (
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	binaryName = "gamesession-controller"
	// entrypoint is where the binary sits in the image.
	entrypoint = "/" + binaryName
	// user is distroless's nonroot user, which artifacts/manager's
	// runAsUser names too.
	user = "65532:65532"
	// caBundlePath is both where the host's bundle is read from and where
	// the image has it: the first path Go's crypto/x509 tries on Linux.
	caBundlePath = "/etc/ssl/certs/ca-certificates.crt"

	// ldflags strip the symbol table and DWARF; versionVar is stamped
	// with the version label, so that --version and the start-up log say
	// what the image says.
	ldflags    = "-s -w"
	versionVar = "github.com/example/gamesession-controller/cmd/gamesession-controller/app.Version"

	// Names of the outputs under -out.
	layoutDirName = "oci"
	archiveName   = binaryName + ".tar"
)

type options struct {
	// Flags.
	repo, out              string
	tag, version, revision string
	source                 string
	sourceDateEpoch        int64
	platforms              string
	caBundle               string
	dockerArch             string

	// What validate derives from them.
	created         time.Time
	parsedTag       name.Tag
	parsedPlatforms []v1.Platform
	caBundleData    []byte
}

func main() {
	var o options
	flag.StringVar(&o.repo, "repo", "", "Root of the gamesession-controller repository (required).")
	flag.StringVar(&o.out, "out", "", "Output directory: the OCI layout goes to OUT/"+layoutDirName+", its tar to OUT/"+archiveName+" (required).")
	flag.StringVar(&o.tag, "tag", "gamesession-controller:dev", "Image reference the loaders name the image after.")
	flag.StringVar(&o.version, "version", "", "Version label, e.g. from `git describe --tags --always --dirty` (required).")
	flag.StringVar(&o.revision, "revision", "", "Revision label: the commit built, `git rev-parse HEAD` (required).")
	flag.StringVar(&o.source, "source", "https://github.com/example/gamesession-controller", "Source label: where the code lives.")
	flag.Int64Var(&o.sourceDateEpoch, "source-date-epoch", envEpoch(), "Timestamp of every file, the config and the created label, in Unix seconds; the commit time makes builds reproducible. Default: $SOURCE_DATE_EPOCH, else 0.")
	flag.StringVar(&o.platforms, "platforms", "linux/amd64,linux/arm64", "Comma-separated platforms of the image index.")
	flag.StringVar(&o.caBundle, "ca-bundle", caBundlePath, "PEM bundle of CA certificates copied into the image.")
	flag.StringVar(&o.dockerArch, "docker-arch", runtime.GOARCH, "Architecture of the one image listed in the tar's manifest.json, which docker load reads when its image store is not containerd's and so holds one platform per name.")
	flag.Parse()

	if err := run(&o); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

// envEpoch reads SOURCE_DATE_EPOCH (reproducible-builds.org), else 0.
func envEpoch() int64 {
	n, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// validate checks the flags and derives from them what the build needs.
func (o *options) validate() error {
	for _, f := range []struct{ flag, value string }{
		{"-repo", o.repo}, {"-out", o.out}, {"-version", o.version}, {"-revision", o.revision},
	} {
		if strings.TrimSpace(f.value) == "" {
			return fmt.Errorf("%s is required", f.flag)
		}
	}
	if _, err := os.Stat(filepath.Join(o.repo, "cmd", binaryName)); err != nil {
		return fmt.Errorf("-repo %s is not the controller's repository: %w", o.repo, err)
	}
	tag, err := name.NewTag(o.tag)
	if err != nil {
		return fmt.Errorf("-tag: %w", err)
	}
	o.parsedTag = tag
	for _, p := range strings.Split(o.platforms, ",") {
		platform, err := v1.ParsePlatform(strings.TrimSpace(p))
		if err != nil || platform.OS != "linux" || platform.Architecture == "" {
			return fmt.Errorf("-platforms: %q is not linux/ARCH", p)
		}
		o.parsedPlatforms = append(o.parsedPlatforms, *platform)
	}
	if !slices.ContainsFunc(o.parsedPlatforms, func(p v1.Platform) bool { return p.Architecture == o.dockerArch }) {
		return fmt.Errorf("-docker-arch %s is not among -platforms %s", o.dockerArch, o.platforms)
	}
	o.created = time.Unix(o.sourceDateEpoch, 0).UTC()

	o.caBundleData, err = os.ReadFile(o.caBundle)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no CA certificates at %s: install them (Debian/Ubuntu: apt-get install ca-certificates) or point -ca-bundle at a PEM bundle", o.caBundle)
	}
	if err != nil {
		return err
	}
	if block, _ := pem.Decode(o.caBundleData); block == nil || block.Type != "CERTIFICATE" {
		return fmt.Errorf("%s holds no PEM certificate", o.caBundle)
	}
	return nil
}

// run builds every platform's image and writes the outputs.
func run(o *options) error {
	if err := o.validate(); err != nil {
		return err
	}
	begin := time.Now()
	binDir, err := os.MkdirTemp("", "gamesession-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(binDir)

	labels := o.labels()
	var manifests []mutate.IndexAddendum
	var dockerImage v1.Image
	for _, platform := range o.parsedPlatforms {
		img, err := o.platformImage(platform, binDir, labels)
		if err != nil {
			return fmt.Errorf("%s: %w", platform, err)
		}
		manifests = append(manifests, mutate.IndexAddendum{
			Add:        plainImage{img},
			Descriptor: v1.Descriptor{Platform: &platform},
		})
		if platform.Architecture == o.dockerArch {
			dockerImage = img
		}
	}
	// The OCI annotations of the index repeat the labels, for registries
	// that show an index's annotations.
	index := mutate.Annotations(mutate.AppendManifests(empty.Index, manifests...), labels).(v1.ImageIndex)

	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	digest, err := o.writeOutputs(index, dockerImage)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "image: %s (%s, index %s) in %.1fs\n",
		o.tag, o.platforms, digest, time.Since(begin).Seconds())
	return nil
}

// plainImage describes itself in an index without an artifactType, which
// go-containerregistry otherwise sets to the config's media type: that field
// marks artifacts, and some registries and tools would take the image for one.
type plainImage struct{ v1.Image }

func (plainImage) ArtifactType() (string, error) { return "", nil }

// labels are the image's OCI labels (and the index's annotations).
func (o *options) labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       binaryName,
		"org.opencontainers.image.description": "Runs one Deployment per GameSession and rolls it out when the profile ConfigMap it references changes.",
		"org.opencontainers.image.source":      o.source,
		"org.opencontainers.image.revision":    o.revision,
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.created":     o.created.Format(time.RFC3339),
	}
}

// platformImage builds the binary for one platform and returns its image.
func (o *options) platformImage(platform v1.Platform, binDir string, labels map[string]string) (v1.Image, error) {
	start := time.Now()
	binPath := filepath.Join(binDir, platform.Architecture, binaryName)
	if err := goBuild(o.repo, platform.Architecture, o.version, binPath); err != nil {
		return nil, err
	}
	binary, err := os.ReadFile(binPath)
	if err != nil {
		return nil, err
	}
	layer, err := rootfsLayer(rootfsEntries(binary, o.caBundleData), o.created)
	if err != nil {
		return nil, err
	}
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: platform.Architecture,
		OS:           platform.OS,
		Variant:      platform.Variant,
		Created:      v1.Time{Time: o.created},
		Config: v1.Config{
			User:       user,
			Entrypoint: []string{entrypoint},
			WorkingDir: "/",
			Labels:     labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	// empty.Image is a Docker-typed manifest; these make it an OCI one.
	img = mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: o.created},
			CreatedBy: "hack/build-image.sh",
			Comment:   "static " + binaryName + ", CA certificates, nonroot user",
		},
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "image: %s built in %.1fs\n", platform, time.Since(start).Seconds())
	return img, nil
}

// goBuild cross-compiles the controller: static (no cgo, for a base without
// libc), -trimpath so that the build directory does not show in the binary.
func goBuild(repo, goarch, version, dest string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags="+ldflags+" -X "+versionVar+"="+version, "-o", dest, "./cmd/"+binaryName)
	cmd.Dir = repo
	// The baseline instruction sets, whatever `go env -w` set on this host:
	// the image must run on any amd64 or arm64 node.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch, "GOAMD64=v1", "GOARM64=v8.0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s: %w", goarch, err)
	}
	return nil
}

// writeOutputs writes the layout directory and its tar, each first under a
// temporary name, so that an interrupted build never leaves a half-written
// image where a previous one was. It returns the index digest.
func (o *options) writeOutputs(index v1.ImageIndex, dockerImage v1.Image) (v1.Hash, error) {
	digest, err := index.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	tmp, err := os.MkdirTemp(o.out, ".oci-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(tmp)

	// index.json lists the multi-platform index once, named: podman load and
	// crane push take a layout whose index.json has exactly one entry, and
	// docker (containerd store) and podman name the image after these
	// annotations.
	ref := o.parsedTag
	registry := ref.RegistryStr()
	if registry == name.DefaultRegistry {
		registry = "docker.io" // what docker and containerd call Docker Hub
	}
	top := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{
		Add: index,
		Descriptor: v1.Descriptor{Annotations: map[string]string{
			"org.opencontainers.image.ref.name": ref.TagStr(),
			"io.containerd.image.name":          registry + "/" + ref.RepositoryStr() + ":" + ref.TagStr(),
		}},
	})
	if _, err := layout.Write(tmp, top); err != nil {
		return v1.Hash{}, fmt.Errorf("write OCI layout: %w", err)
	}
	if err := writeDockerManifest(tmp, o.tag, dockerImage); err != nil {
		return v1.Hash{}, err
	}

	layoutDir := filepath.Join(o.out, layoutDirName)
	archive := filepath.Join(o.out, archiveName)
	tmpArchive := archive + ".tmp"
	defer os.Remove(tmpArchive)
	if err := tarDirectory(tmp, tmpArchive, o.created); err != nil {
		return v1.Hash{}, fmt.Errorf("write %s: %w", archive, err)
	}
	if err := os.Rename(tmpArchive, archive); err != nil {
		return v1.Hash{}, err
	}
	if err := os.RemoveAll(layoutDir); err != nil {
		return v1.Hash{}, err
	}
	if err := os.Rename(tmp, layoutDir); err != nil {
		return v1.Hash{}, err
	}
	// MkdirTemp made it private; the layout is as readable as the tar.
	return digest, os.Chmod(layoutDir, 0o755)
}
