// Command image builds the controller's container image with neither a Docker
// engine nor a registry: it cross-compiles the static binary for each platform,
// lays it on an empty base with the few files it needs at run time, and writes
// a multi-platform OCI image layout plus a tar of it that docker load, podman
// load and crane push accept. hack/build-image.sh runs it (`make image`).
//
// It lives in its own module so that go-containerregistry never enters the
// controller's module graph. main.go takes the flags, builds the binaries and
// assembles the image index; tar.go writes the image's filesystem layer and
// the archive of the layout.
package main
