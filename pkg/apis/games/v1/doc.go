// Package v1 is version v1 of the games.example.com API: the GameSession
// resource, which runs one game-server Deployment configured by a shared
// profile ConfigMap. types.go holds [GameSession], its spec and status, and
// the names that are part of the API: the profile label, the condition types
// and their reasons.
//
// The types are the source of everything generated about them. The +k8s and
// +genclient markers (below and on GameSession) drive code-generator: the
// deepcopy and register functions in zz_generated.*.go, and the clientset,
// listers and informers in pkg/generated. The +kubebuilder markers and the
// field comments drive controller-gen: the CRD in artifacts/crd, with its
// schema, defaults, CEL validation and the descriptions `kubectl explain`
// shows. After changing a type, a marker or a field's comment, run
// hack/update-codegen.sh and commit its output; `make verify` fails until
// then. internal/fuzzinput.CRDAccepts mirrors the validation by hand, so
// change it too.
//
// +k8s:deepcopy-gen=package
// +groupName=games.example.com
package v1
