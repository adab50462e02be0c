// Package deploy tests the Helm chart in charts/gamesession-controller
// against the kustomize install in artifacts/ and a real, local control
// plane: lint, render equality with kustomize, server-side dry runs, a Helm
// SDK install in both RBAC modes, and the controller binary running with the
// token of the chart's ServiceAccount.
//
// It is a module of its own so that Helm and kustomize, and their many
// dependencies, stay out of the controller's module graph.
package deploy
