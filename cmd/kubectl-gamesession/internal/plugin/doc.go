// Package plugin implements the commands of kubectl-gamesession, the kubectl
// plugin of the GameSession controller.
//
// The cobra commands (NewRootCommand) only parse flags and build clients;
// the work is done by functions that take a Clients and an io.Writer
// (Status, Pause, Resume, History, Undo), so that tests run them on fake
// clientsets as well as on a real API server.
//
// Everything the plugin reads is what the controller writes: a profile is a
// ConfigMap labelled games.example.com/profile=true, its ProfileRollout (of
// the same name and namespace) is the rollout's state, and its revisions are
// immutable ConfigMaps holding each content the profile had. The plugin
// never writes a ProfileRollout or a revision; pause, resume and undo write
// the profile only, and the controller acts on the change as on any edit.
package plugin
