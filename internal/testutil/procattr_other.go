//go:build !linux

package testutil

import "syscall"

// childProcAttr: only Linux can tie a child's life to its parent's; elsewhere
// the test cleanups are what stop controller processes.
func childProcAttr() *syscall.SysProcAttr { return nil }
