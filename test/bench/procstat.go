package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat. It is
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// memStatus is a process's resident memory, from /proc/PID/status.
type memStatus struct {
	RSS, HWM uint64 // bytes; HWM is the peak RSS since the process started
}

func readMem(pid int) (memStatus, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memStatus{}, err
	}
	defer f.Close()
	var m memStatus
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseUint(fields[1], 10, 64)
		switch fields[0] {
		case "VmRSS:":
			m.RSS = kb << 10
		case "VmHWM:":
			m.HWM = kb << 10
		}
	}
	return m, sc.Err()
}

// cpuSeconds is the user plus system CPU time a process has used so far.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, field 2, may hold spaces; fields count from after it.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / clockTicks
}

// machineCPU returns the busy and total CPU time of the whole machine, in
// clock ticks summed over CPUs, from the first line of /proc/stat. Steal time
// counts as busy: a neighbour's work is a core the benchmark did not get.
func machineCPU() (busy, total float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	for i, f := range fields[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}

// findComponentPIDs finds the etcd and kube-apiserver processes of the control
// plane living in dir, by their command lines: the controlplane package does
// not expose PIDs, and these two are the ones sharing the CPU with the
// controller.
func findComponentPIDs(dir string) map[string]int {
	out := map[string]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(b), dir) {
			continue
		}
		args := strings.Split(string(b), "\x00")
		switch filepath.Base(args[0]) {
		case "etcd", "kube-apiserver":
			out[filepath.Base(args[0])] = pid
		}
	}
	return out
}

// machine describes where the numbers were taken.
type machine struct {
	CPUs      int
	CPUModel  string
	MemTotal  string
	GoVersion string
	Kernel    string
}

func describeMachine() machine {
	m := machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "MemTotal:") {
				fields := strings.Fields(line)
				if kb, err := strconv.ParseFloat(fields[1], 64); err == nil {
					m.MemTotal = fmt.Sprintf("%.1f GiB", kb/(1<<20))
				}
			}
		}
	}
	return m
}
