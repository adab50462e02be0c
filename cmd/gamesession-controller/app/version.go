package app

// Version is the controller's version. Builds set it with
// -ldflags "-X github.com/example/gamesession-controller/cmd/gamesession-controller/app.Version=v1.2.3":
// `make build` and `make image` pass what git describes. A plain `go build`
// leaves "dev".
var Version = "dev"
