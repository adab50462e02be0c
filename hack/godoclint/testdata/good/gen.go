//go:build ignore

// This program stands beside the package and is never built with it.
package main

func Undocumented() {}

func main() {}
