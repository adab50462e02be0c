// Command kubectl-gamesession is the kubectl plugin of the GameSession
// controller: `kubectl gamesession rollout status|pause|resume|history|undo
// PROFILE` follows and steers the rollout of a profile ConfigMap to its
// GameSessions. Installed on the PATH (go install .), kubectl runs it as
// `kubectl gamesession`.
//
// main.go only runs the command tree of package internal/plugin, where the
// commands are, with their tests; internal/e2e runs them against the
// controller on a real control plane. This directory is a Go module of its
// own, so that cli-runtime and cobra stay out of the controller's.
package main
