# The controller image: a static binary on distroless, running as non-root.
#   docker build -t gamesession-controller:dev .

FROM golang:1.26 AS builder
WORKDIR /src
# Modules first, so that a change of source does not download them again.
COPY go.mod go.sum ./
RUN go mod download
# Only what the binary is built from; tests, tools and manifests stay out.
COPY cmd/ cmd/
COPY pkg/ pkg/
# Static (no cgo) for the libc-less base image; -trimpath and -s -w keep
# build paths and symbol tables out of the binary.
ARG TARGETOS=linux
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o /out/gamesession-controller ./cmd/gamesession-controller

# No shell or package manager: nothing to exploit beyond the binary.
FROM gcr.io/distroless/static:nonroot
COPY --from=builder /out/gamesession-controller /gamesession-controller
# The nonroot user of the base image; the Deployment's runAsUser matches it.
USER 65532:65532
ENTRYPOINT ["/gamesession-controller"]
