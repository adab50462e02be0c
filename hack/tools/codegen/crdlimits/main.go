// Command crdlimits bounds the lists and strings of the pod template in the
// generated GameSession CRD.
//
// The template's schema comes from k8s.io/api's Go types, which carry no
// maxItems or maxLength markers: Pod validation checks those limits in Go.
// Without bounds, the API server estimates the cost of the CRD's CEL rules
// over the template (container images, mounts, names) as if a request could
// hold millions of containers, and refuses the CRD. The bounds set here are
// far above what a game server pod uses, and each is stated in the field's
// description so that kubectl explain shows it. The images of the template
// get spec.image's pattern.
//
// Usage: crdlimits FILE (rewritten in place).
package main

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// limit bounds one list (maxItems) or string (maxLength) of the pod spec.
type limit struct {
	path  []string // property names from the pod spec; "[]" steps into list items
	key   string   // maxItems or maxLength
	value int
}

var limits = []limit{
	{[]string{"containers"}, "maxItems", 32},
	{[]string{"initContainers"}, "maxItems", 32},
	{[]string{"volumes"}, "maxItems", 128},
	{[]string{"volumes", "[]", "name"}, "maxLength", 63},
}

// containerLimits apply to the items of containers and initContainers.
var containerLimits = []limit{
	{[]string{"name"}, "maxLength", 63},
	{[]string{"image"}, "maxLength", 512},
	{[]string{"volumeMounts"}, "maxItems", 128},
	{[]string{"volumeMounts", "[]", "mountPath"}, "maxLength", 1024},
	{[]string{"ports"}, "maxItems", 64},
	{[]string{"ports", "[]", "name"}, "maxLength", 15},
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: crdlimits FILE")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "crdlimits:", err)
		os.Exit(1)
	}
}

func run(file string) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var crd map[string]any
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		return err
	}
	versions, _ := dig(crd, "spec", "versions").([]any)
	if len(versions) == 0 {
		return fmt.Errorf("%s: no versions", file)
	}
	for _, v := range versions {
		podSpec, ok := dig(v, "schema", "openAPIV3Schema", "properties", "spec", "properties", "template", "properties", "spec").(map[string]any)
		if !ok {
			return fmt.Errorf("%s: no spec.template.spec in the schema", file)
		}
		for _, l := range limits {
			if err := apply(podSpec, l); err != nil {
				return err
			}
		}
		// The template's images follow spec.image's pattern: an OpenAPI
		// pattern is compiled once, where a CEL matches() over every
		// container costs each write of a session (its status included) a
		// multiple of it.
		pattern, ok := dig(v, "schema", "openAPIV3Schema", "properties", "spec", "properties", "image", "pattern").(string)
		if !ok {
			return fmt.Errorf("%s: spec.image has no pattern", file)
		}
		for _, list := range []string{"containers", "initContainers"} {
			for _, l := range containerLimits {
				l.path = append([]string{list, "[]"}, l.path...)
				if err := apply(podSpec, l); err != nil {
					return err
				}
			}
			image, ok := dig(podSpec, "properties", list, "items", "properties", "image").(map[string]any)
			if !ok {
				return fmt.Errorf("%s: no image in spec.template.spec.%s", file, list)
			}
			image["pattern"] = pattern
			image["description"] = image["description"].(string) + "\nIn a GameSession, an image reference as spec.image describes it."
		}
	}
	out, err := yaml.Marshal(crd)
	if err != nil {
		return err
	}
	return os.WriteFile(file, append([]byte("---\n"), out...), 0o644)
}

// apply sets l on the schema it names under podSpec, and says so in its
// description.
func apply(podSpec map[string]any, l limit) error {
	schema := podSpec
	for _, step := range l.path {
		var next any
		if step == "[]" {
			next = schema["items"]
		} else {
			next = dig(schema, "properties", step)
		}
		s, ok := next.(map[string]any)
		if !ok {
			return fmt.Errorf("spec.template.spec: no schema at %v", l.path)
		}
		schema = s
	}
	schema[l.key] = l.value
	what := fmt.Sprintf("At most %d items in a GameSession.", l.value)
	if l.key == "maxLength" {
		what = fmt.Sprintf("At most %d characters in a GameSession.", l.value)
	}
	if d, _ := schema["description"].(string); d != "" {
		schema["description"] = d + "\n" + what
	} else {
		schema["description"] = what
	}
	return nil
}

// dig follows keys through nested objects, nil where one is missing.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}
