// Package good has one package comment, in doc.go, and every exported name
// documented in a form the linter accepts.
package good
