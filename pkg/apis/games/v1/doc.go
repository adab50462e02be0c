// Package v1 is version v1 of the games.example.com API: the GameSession
// resource, which runs one game-server Deployment configured by a shared
// profile ConfigMap.
//
// +k8s:deepcopy-gen=package
// +groupName=games.example.com
package v1
