// Package image_test checks the controller image that `make image` builds
// (hack/build-image.sh): its OCI layout and archive, its config and its whole
// filesystem, and (on Linux) that its entrypoint runs from the unpacked
// filesystem as the image's user, against a local control plane.
//
// It reads the layout with the standard library only, as any consumer of the
// OCI format would, not with the library that wrote it.
package image_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/example/gamesession-controller/internal/controlplane"
)

const (
	// imageRef is the IMAGE the test builds, to check that the name reaches
	// the annotations the loaders read.
	imageRef = "gamesession-controller:image-test"
	// hostCABundle is what the build copies into the image.
	hostCABundle = "/etc/ssl/certs/ca-certificates.crt"

	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	// The control plane only serves the run of the entrypoint; it is idle
	// while the image builds.
	controlplane.RunTestMain(m, controlplane.Options{}, func(c *controlplane.ControlPlane) { cp = c })
}

// The OCI structures the test reads: the fields it checks, nothing more.
type (
	platform struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
		Variant      string `json:"variant,omitempty"`
	}
	descriptor struct {
		MediaType    string            `json:"mediaType"`
		ArtifactType string            `json:"artifactType"`
		Digest       string            `json:"digest"`
		Size         int64             `json:"size"`
		Annotations  map[string]string `json:"annotations"`
		Platform     *platform         `json:"platform"`
	}
	ociIndex struct {
		SchemaVersion int               `json:"schemaVersion"`
		MediaType     string            `json:"mediaType"`
		Manifests     []descriptor      `json:"manifests"`
		Annotations   map[string]string `json:"annotations"`
	}
	ociManifest struct {
		SchemaVersion int          `json:"schemaVersion"`
		MediaType     string       `json:"mediaType"`
		Config        descriptor   `json:"config"`
		Layers        []descriptor `json:"layers"`
	}
	ociConfig struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
		Config       struct {
			User       string            `json:"User"`
			Entrypoint []string          `json:"Entrypoint"`
			Cmd        []string          `json:"Cmd"`
			Env        []string          `json:"Env"`
			WorkingDir string            `json:"WorkingDir"`
			Labels     map[string]string `json:"Labels"`
		} `json:"config"`
		RootFS struct {
			Type    string   `json:"type"`
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
)

// builtImage is the image of one platform in the built layout.
type builtImage struct {
	platform string // os/arch
	manifest ociManifest
	config   ociConfig
}

// builtLayout is what hack/build-image.sh wrote.
type builtLayout struct {
	dir     string // the OCI layout
	archive string // its tar
	top     ociIndex
	index   ociIndex // the multi-platform index top names
	images  map[string]builtImage
}

var build struct {
	once   sync.Once
	layout *builtLayout
	err    error
}

// buildTimeout bounds the build: two cross-compilations of the controller.
// Warm, they take under a minute; on a cold build cache about 16 CPU-minutes,
// so some 8 minutes on two idle cores and three times that on busy ones.
const buildTimeout = 25 * time.Minute

// imageLayout builds the image once per test binary with the script `make
// image` runs, into the control plane's directory (removed with it), and
// reads its layout.
func imageLayout(t *testing.T) *builtLayout {
	t.Helper()
	build.once.Do(func() {
		out := filepath.Join(cp.Dir(), "image")
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(repoRoot(), "hack", "build-image.sh"))
		// The labels come from git, as for `make image`, whatever this
		// shell's environment says.
		env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
			name, _, _ := strings.Cut(kv, "=")
			return slices.Contains([]string{"VERSION", "REVISION", "SOURCE_DATE_EPOCH", "IMAGE_FLAGS"}, name)
		})
		cmd.Env = append(env, "IMAGE="+imageRef, "IMAGE_DIR="+out)
		stopTreeOnCancel(cmd)
		start := time.Now()
		output, err := cmd.CombinedOutput()
		if err != nil {
			build.err = fmt.Errorf("hack/build-image.sh: %v\n%s", err, output)
			return
		}
		t.Logf("hack/build-image.sh built the image in %.1fs:\n%s", time.Since(start).Seconds(), output)
		build.layout, build.err = readLayout(filepath.Join(out, "oci"))
		if build.err == nil {
			build.layout.archive = filepath.Join(out, "gamesession-controller.tar")
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.layout
}

// repoRoot is the main module's root, two levels above this package, the
// test's working directory.
func repoRoot() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Dir(filepath.Dir(wd))
}

func hostPlatform() string { return "linux/" + runtime.GOARCH }

// readLayout reads and checks the structure of the layout: index.json names
// one index, which lists one image per platform. Every blob read is checked
// against its digest and size.
func readLayout(dir string) (*builtLayout, error) {
	l := &builtLayout{dir: dir, images: map[string]builtImage{}}
	marker, err := os.ReadFile(filepath.Join(dir, "oci-layout"))
	if err != nil {
		return nil, err
	}
	var version struct {
		ImageLayoutVersion string `json:"imageLayoutVersion"`
	}
	if err := json.Unmarshal(marker, &version); err != nil || version.ImageLayoutVersion != "1.0.0" {
		return nil, fmt.Errorf("oci-layout is %q, want imageLayoutVersion 1.0.0 (%v)", marker, err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &l.top); err != nil {
		return nil, fmt.Errorf("index.json: %w", err)
	}
	if len(l.top.Manifests) != 1 || l.top.Manifests[0].MediaType != mediaTypeIndex {
		return nil, fmt.Errorf("index.json should name exactly one image index, has %+v", l.top.Manifests)
	}
	if err := l.readJSON(l.top.Manifests[0], &l.index); err != nil {
		return nil, err
	}
	for _, d := range l.index.Manifests {
		if d.Platform == nil {
			return nil, fmt.Errorf("manifest %s has no platform in the index", d.Digest)
		}
		if d.MediaType != mediaTypeManifest || d.ArtifactType != "" {
			return nil, fmt.Errorf("manifest %s has media type %s and artifact type %q, want %s and none (an image, not an artifact)",
				d.Digest, d.MediaType, d.ArtifactType, mediaTypeManifest)
		}
		img := builtImage{platform: d.Platform.OS + "/" + d.Platform.Architecture}
		if _, dup := l.images[img.platform]; dup {
			return nil, fmt.Errorf("two manifests for %s", img.platform)
		}
		if err := l.readJSON(d, &img.manifest); err != nil {
			return nil, err
		}
		if err := l.readJSON(img.manifest.Config, &img.config); err != nil {
			return nil, err
		}
		l.images[img.platform] = img
	}
	return l, nil
}

// blob returns the content of d, checked against its digest and size.
func (l *builtLayout) blob(d descriptor) ([]byte, error) {
	hexDigest, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok {
		return nil, fmt.Errorf("digest %q is not sha256", d.Digest)
	}
	data, err := os.ReadFile(filepath.Join(l.dir, "blobs", "sha256", hexDigest))
	if err != nil {
		return nil, err
	}
	if got := sha256Hex(data); got != hexDigest || int64(len(data)) != d.Size {
		return nil, fmt.Errorf("blob %s: sha256 %s and size %d, the descriptor says size %d", d.Digest, got, len(data), d.Size)
	}
	return data, nil
}

func (l *builtLayout) readJSON(d descriptor, v any) error {
	data, err := l.blob(d)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	return nil
}

func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// layerFile is one entry of a layer.
type layerFile struct {
	hdr  *tar.Header
	data []byte
}

// readLayers reads the image's layers in order, checking each against its
// diff ID in the config, and calls fn for each entry.
func (l *builtLayout) readLayers(img builtImage, fn func(layerFile) error) error {
	if len(img.manifest.Layers) != len(img.config.RootFS.DiffIDs) {
		return fmt.Errorf("%s: %d layers but %d diff IDs", img.platform, len(img.manifest.Layers), len(img.config.RootFS.DiffIDs))
	}
	for i, d := range img.manifest.Layers {
		if d.MediaType != mediaTypeLayer {
			return fmt.Errorf("layer %s has media type %s, want %s", d.Digest, d.MediaType, mediaTypeLayer)
		}
		compressed, err := l.blob(d)
		if err != nil {
			return err
		}
		zr, err := gzip.NewReader(bytes.NewReader(compressed))
		if err != nil {
			return fmt.Errorf("layer %s: %w", d.Digest, err)
		}
		uncompressed, err := io.ReadAll(zr)
		if err != nil {
			return fmt.Errorf("layer %s: %w", d.Digest, err)
		}
		if diffID := "sha256:" + sha256Hex(uncompressed); diffID != img.config.RootFS.DiffIDs[i] {
			return fmt.Errorf("layer %s uncompresses to %s, the config's diff ID is %s", d.Digest, diffID, img.config.RootFS.DiffIDs[i])
		}
		tr := tar.NewReader(bytes.NewReader(uncompressed))
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return fmt.Errorf("layer %s: %w", d.Digest, err)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			if err := fn(layerFile{hdr: hdr, data: data}); err != nil {
				return err
			}
		}
	}
	return nil
}

// wantFile is an entry the image must have: its tar type, permission bits
// (with sticky) and owner.
type wantFile struct {
	typ      byte
	mode     int64
	uid, gid int
}

// wantFiles is the image's whole filesystem. Anything else (a shell, a
// package manager, a libc) fails the test.
var wantFiles = map[string]wantFile{
	"etc/":                              {tar.TypeDir, 0o755, 0, 0},
	"etc/group":                         {tar.TypeReg, 0o644, 0, 0},
	"etc/passwd":                        {tar.TypeReg, 0o644, 0, 0},
	"etc/ssl/":                          {tar.TypeDir, 0o755, 0, 0},
	"etc/ssl/certs/":                    {tar.TypeDir, 0o755, 0, 0},
	"etc/ssl/certs/ca-certificates.crt": {tar.TypeReg, 0o644, 0, 0},
	"gamesession-controller":            {tar.TypeReg, 0o755, 0, 0},
	"home/":                             {tar.TypeDir, 0o755, 0, 0},
	"home/nonroot/":                     {tar.TypeDir, 0o700, 65532, 65532},
	"tmp/":                              {tar.TypeDir, 0o1777, 0, 0},
}

// shells are what an attacker or a debugging habit would look for first.
var shells = []string{"bin/sh", "bin/bash", "bin/ash", "bin/dash", "bin/busybox", "usr/bin/sh", "usr/bin/bash", "usr/bin/busybox"}

var elfMachines = map[string]elf.Machine{"linux/amd64": elf.EM_X86_64, "linux/arm64": elf.EM_AARCH64}

func TestImageLayout(t *testing.T) {
	l := imageLayout(t)

	// index.json names the image for the loaders.
	named := l.top.Manifests[0].Annotations
	if got := named["org.opencontainers.image.ref.name"]; got != "image-test" {
		t.Errorf("index.json: org.opencontainers.image.ref.name is %q, want the tag %q", got, "image-test")
	}
	if got, want := named["io.containerd.image.name"], "docker.io/library/"+imageRef; got != want {
		t.Errorf("index.json: io.containerd.image.name is %q, want %q", got, want)
	}
	if got := slices.Sorted(maps.Keys(l.images)); !slices.Equal(got, []string{"linux/amd64", "linux/arm64"}) {
		t.Fatalf("the image index has platforms %v, want exactly linux/amd64 and linux/arm64", got)
	}

	revision := gitHead(t)
	for _, platformName := range slices.Sorted(maps.Keys(l.images)) {
		img := l.images[platformName]
		t.Run(strings.ReplaceAll(platformName, "/", "-"), func(t *testing.T) {
			checkConfig(t, img, revision)
			checkFilesystem(t, l, img)
		})
	}
	checkArchive(t, l)
}

func gitHead(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "-C", repoRoot(), "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func checkConfig(t *testing.T, img builtImage, revision string) {
	t.Helper()
	if img.manifest.Config.MediaType != mediaTypeConfig {
		t.Errorf("config media type %s, want %s", img.manifest.Config.MediaType, mediaTypeConfig)
	}
	c := img.config
	if got := c.OS + "/" + c.Architecture; got != img.platform {
		t.Errorf("config is for %s, its index entry says %s", got, img.platform)
	}
	if c.Config.User != "65532:65532" {
		t.Errorf("User is %q, want 65532:65532 (nonroot)", c.Config.User)
	}
	if !slices.Equal(c.Config.Entrypoint, []string{"/gamesession-controller"}) || len(c.Config.Cmd) != 0 {
		t.Errorf("Entrypoint %q, Cmd %q: want [/gamesession-controller] and no Cmd", c.Config.Entrypoint, c.Config.Cmd)
	}
	if c.Config.WorkingDir != "/" {
		t.Errorf("WorkingDir is %q, want /", c.Config.WorkingDir)
	}
	for _, key := range []string{"source", "revision", "version", "created", "title"} {
		if c.Config.Labels["org.opencontainers.image."+key] == "" {
			t.Errorf("label org.opencontainers.image.%s is missing or empty; labels: %v", key, c.Config.Labels)
		}
	}
	if got := c.Config.Labels["org.opencontainers.image.revision"]; got != revision {
		t.Errorf("revision label %q, want HEAD %s", got, revision)
	}
}

func checkFilesystem(t *testing.T, l *builtLayout, img builtImage) {
	t.Helper()
	files := map[string]layerFile{}
	err := l.readLayers(img, func(f layerFile) error {
		name := f.hdr.Name
		if strings.HasPrefix(path.Base(name), ".wh.") {
			return fmt.Errorf("whiteout %s: a single-layer image has nothing to delete", name)
		}
		if _, dup := files[name]; dup {
			return fmt.Errorf("%s twice", name)
		}
		files[name] = f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, shell := range shells {
		if _, ok := files[shell]; ok {
			t.Errorf("the image has a shell: /%s", shell)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		h := files[name].hdr
		want, ok := wantFiles[name]
		if !ok {
			t.Errorf("unexpected file /%s in the image", name)
			continue
		}
		if got := (wantFile{h.Typeflag, h.Mode, h.Uid, h.Gid}); got != want {
			t.Errorf("/%s: type %q mode %o owner %d:%d, want type %q mode %o owner %d:%d",
				name, got.typ, got.mode, got.uid, got.gid, want.typ, want.mode, want.uid, want.gid)
		}
	}
	for name := range wantFiles {
		if _, ok := files[name]; !ok {
			t.Errorf("/%s is missing from the image", name)
		}
	}
	if t.Failed() {
		return
	}

	if !strings.Contains(string(files["etc/passwd"].data), "\nnonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user 65532:\n%s", files["etc/passwd"].data)
	}
	if !strings.Contains(string(files["etc/group"].data), "\nnonroot:x:65532:") {
		t.Errorf("/etc/group has no nonroot group 65532:\n%s", files["etc/group"].data)
	}
	checkCABundle(t, files["etc/ssl/certs/ca-certificates.crt"].data)
	checkStaticBinary(t, img.platform, files["gamesession-controller"].data)
}

// checkCABundle: the host's bundle, every block of it a certificate.
func checkCABundle(t *testing.T, bundle []byte) {
	t.Helper()
	host, err := os.ReadFile(hostCABundle)
	if err != nil {
		t.Fatalf("the build copies %s, which the test cannot read: %v", hostCABundle, err)
	}
	if !bytes.Equal(bundle, host) {
		t.Errorf("the image's CA bundle differs from %s", hostCABundle)
	}
	n := 0
	for rest := bundle; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if _, err := x509.ParseCertificate(block.Bytes); block.Type != "CERTIFICATE" || err != nil {
			t.Fatalf("CA bundle block %d: type %s: %v", n, block.Type, err)
		}
		n++
	}
	if n == 0 {
		t.Fatal("the CA bundle holds no certificate")
	}
}

// checkStaticBinary: an ELF for the platform's machine with no program
// interpreter, i.e. statically linked, which an image without libc needs.
func checkStaticBinary(t *testing.T, platformName string, binary []byte) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(binary))
	if err != nil {
		t.Fatalf("/gamesession-controller is not an ELF binary: %v", err)
	}
	defer f.Close()
	if want := elfMachines[platformName]; f.Machine != want {
		t.Errorf("/gamesession-controller is built for %s, want %s", f.Machine, want)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("/gamesession-controller has a program interpreter: it is dynamically linked")
		}
	}
}

// checkArchive: the tar holds exactly the layout's files, with their
// content, and its manifest.json (for Docker's classic image store) names the
// image of this host's architecture, the build's default.
func checkArchive(t *testing.T, l *builtLayout) {
	t.Helper()
	f, err := os.Open(l.archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	inTar := map[string]string{} // file name -> sha256
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", l.archive, err)
		}
		if hdr.Typeflag == tar.TypeDir {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		inTar[hdr.Name] = sha256Hex(data)
	}
	inDir := map[string]string{}
	err = filepath.WalkDir(l.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(l.dir, p)
		inDir[filepath.ToSlash(rel)] = sha256Hex(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(inTar, inDir) {
		t.Errorf("%s is not a tar of %s:\ntar: %v\ndir: %v", l.archive, l.dir, inTar, inDir)
	}

	data, err := os.ReadFile(filepath.Join(l.dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var docker []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(data, &docker); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	img, ok := l.images[hostPlatform()]
	if !ok {
		t.Fatalf("no image for this host's platform %s", hostPlatform())
	}
	wantConfig := "blobs/sha256/" + strings.TrimPrefix(img.manifest.Config.Digest, "sha256:")
	if len(docker) != 1 || docker[0].Config != wantConfig || !slices.Equal(docker[0].RepoTags, []string{imageRef}) ||
		len(docker[0].Layers) != len(img.manifest.Layers) {
		t.Errorf("manifest.json is %s, want one entry for config %s tagged %s with %d layers", data, wantConfig, imageRef, len(img.manifest.Layers))
	}
}
