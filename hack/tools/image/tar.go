package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// entry is one file or directory (data nil, name ending in /) of the image.
type entry struct {
	name     string
	mode     int64 // permission, setuid/setgid and sticky bits, as in tar
	uid, gid int
	data     []byte
}

// The nonroot user and group, as in distroless: its home exists, so that a
// library that caches under $HOME can; its shell does not, as there is none.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nonroot:x:65532:\n"
)

// rootfsEntries is the image's whole filesystem, parents before children:
// no shell, no libc, nothing the static binary does not use.
func rootfsEntries(binary, caBundle []byte) []entry {
	return []entry{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: caBundlePath[1:], mode: 0o644, data: caBundle},
		{name: entrypoint[1:], mode: 0o755, data: binary},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: 65532, gid: 65532},
		// Sticky and world-writable, as every /tmp: some libraries need one.
		{name: "tmp/", mode: 0o1777},
	}
}

// rootfsLayer writes entries as a gzipped tar layer in which every timestamp
// is mtime, so that the same inputs give the same digest.
func rootfsLayer(entries []entry, mtime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{
			Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: mtime,
			Typeflag: tar.TypeReg, Size: int64(len(e.data)),
		}
		if e.data == nil {
			hdr.Typeflag, hdr.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	uncompressed := buf.Bytes()
	return tarball.LayerFromOpener(
		func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(uncompressed)), nil },
		tarball.WithMediaType(types.OCILayer),
		tarball.WithCompressionLevel(gzip.DefaultCompression),
		// The layout writer would otherwise compress the layer a second time.
		tarball.WithCompressedCaching,
	)
}

// writeDockerManifest adds the manifest.json of `docker save` to the layout,
// naming img. A Docker engine whose image store is not containerd's (the
// default before Docker 29) loads only archives that have one; containerd,
// podman and crane read index.json and ignore it.
func writeDockerManifest(layoutDir, tag string, img v1.Image) error {
	config, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
	m := struct {
		Config   string
		RepoTags []string
		Layers   []string
	}{Config: blob(config), RepoTags: []string{tag}}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		m.Layers = append(m.Layers, blob(d))
	}
	data, err := json.Marshal([]any{m})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(layoutDir, "manifest.json"), data, 0o644)
}

// tarDirectory writes the tree under dir to the tar file dest, in lexical
// order, owned by root, every timestamp mtime: the OCI archive of a layout.
func tarDirectory(dir, dest string, mtime time.Time) (err error) {
	f, err := os.Create(dest)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime, Mode: 0o644, Typeflag: tar.TypeReg}
		if d.IsDir() {
			hdr.Name, hdr.Mode, hdr.Typeflag = hdr.Name+"/", 0o755, tar.TypeDir
			return tw.WriteHeader(hdr)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr.Size = info.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
