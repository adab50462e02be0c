package nodoc

// Func is documented, but the package is not.
func Func() {}
