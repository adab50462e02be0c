//go:build !linux

package image_test

import (
	"os/exec"
	"time"
)

// stopTreeOnCancel: without process groups, cancelling kills the script
// only; WaitDelay keeps Wait from hanging on its children's output.
func stopTreeOnCancel(cmd *exec.Cmd) {
	cmd.WaitDelay = 10 * time.Second
}
