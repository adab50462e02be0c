package good

// Func starts with its name.
func Func() {}

// Type is documented.
type Type struct{}

// Method starts with its name.
func (Type) Method() {}

// A Thing may start with an article, being a type.
type Thing struct{}

// An Item may too.
type Item struct{}

// The Registry may too.
type Registry struct{}

// Generic has a documented method.
type Generic[K comparable, V any] map[K]V

// Get starts with its name.
func (g Generic[K, V]) Get(k K) V { return g[k] }

// Values of something: a comment on the group documents every name in it.
const (
	One = 1
	Two = 2
)

var (
	// Three documents itself, in a group without a comment.
	Three = 3
)

// Four is a single var.
var Four = 4

// Five, Six are two names in one spec: the comment only has to exist.
var Five, Six = 5, 6

// Types of a group with a comment.
type (
	Seven int
	Eight int
)

// Nine, followed by punctuation, still starts with the name.
func Nine() {}

func unexported() {}

type hidden struct{}

func (hidden) Exported() {}
