package v1

// ImageReferencePattern is the container image reference grammar that the
// CRD checks spec.image and the template's images against (an OpenAPI
// pattern): an optional registry host (and port), a lowercase repository
// path, an optional tag and an optional digest, as container runtimes parse
// them. Kubernetes itself checks only for whitespace, so a reference such as
// registry.example.com/Arena:1.0 would otherwise be accepted and fail at pull
// time. spec.image's marker spells the same expression (a marker cannot
// reference a Go constant), hack/tools/codegen/crdlimits copies it to the
// template's images, and TestCRDImagePatternIsImageReferencePattern keeps
// them the same.
const ImageReferencePattern = `^((?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:[.](?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(?::[0-9]+)?/)?` +
	`[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*` +
	`(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$`
