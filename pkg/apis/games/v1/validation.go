package v1

// ImageReferencePattern is the container image reference grammar that the
// CRD's rules check spec.image and the template's images against: an
// optional registry host (and port), a lowercase repository path, an
// optional tag and an optional digest, as container runtimes parse them.
// Kubernetes itself checks only for whitespace, so a reference such as
// registry.example.com/Arena:1.0 would otherwise be accepted and fail at
// pull time. The CRD's markers spell the same expression (CEL cannot
// reference a Go constant); TestCRDImagePatternIsImageReferencePattern
// keeps the two the same.
const ImageReferencePattern = `^((?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:[.](?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(?::[0-9]+)?/)?` +
	`[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*` +
	`(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$`
