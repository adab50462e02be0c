//go:build !linux

package main

import "os/exec"

func startWithParent(cmd *exec.Cmd) error { return cmd.Start() }
