// Package bad has its package comment outside doc.go, and every kind of
// missing or malformed doc comment.
package bad

func Undocumented() {}

// This comment does not start with the name.
func WrongPrefix() {}

// WrongPrefixy is a longer name than the func it documents.
func WrongPrefixx() {}

// A Function may not use an article: only types may.
func Function() {}

type UndocumentedType struct{}

func (UndocumentedType) Method() {}

func (*UndocumentedType) PointerMethod() {}

// Generic is documented; its method is not.
type Generic[T any] struct{ v T }

func (g *Generic[T]) Get() T { return g.v }

type unexported struct{}

// Not checked: the type is unexported, so the method is not in the docs.
func (unexported) Method() {}

func unexportedFunc() {}

var UndocumentedVar = 1

// The var's comment does not start with its name.
var WrongVar = 2

var A, B = 1, 2

const (
	// In a group without a comment, each name needs its own, starting
	// with the name.
	Documented = 1
	Missing    = 2
	unexported = 3
)

const (
	// Wrong prefix inside an undocumented group.
	InGroup = 1
)

type (
	// GroupedType is fine.
	GroupedType         int
	GroupedUndocumented int
)
