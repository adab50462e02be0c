// Package fuzzinput turns fuzz or random input into GameSessions, and says
// whether the GameSession CRD would accept them. pkg/controller's fuzz
// targets and the integration test's server-side dry run share it, so both
// explore the same inputs.
//
// [Spec] is a GameSession in flat, textual form, which a fuzz engine can
// mutate; [Spec.Session] builds the object and [RandomSpec] (random.go) draws
// one near the CRD's edges. [CRDAccepts] (fuzzinput.go) is a hand-written
// mirror of the CRD's validation, so that fuzz targets only feed the
// controller what the API server would store. A mirror can drift from the
// markers in pkg/apis/games/v1: the dry-run test checks it against the real
// API server, so change both together.
package fuzzinput
