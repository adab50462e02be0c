// Package testonly has test files only; its comment cannot be anywhere else.
package testonly
