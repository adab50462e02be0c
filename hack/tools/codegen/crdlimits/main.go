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
// get spec.image's pattern, and the rules about the template's own fields
// are placed on those fields (templateRules).
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

// rule is a CEL validation rule set on one schema of the pod template.
type rule struct {
	path    []string // property names from spec.template; "[]" steps into list items
	rule    string
	message string
}

// templateRules are the rules about the pod template's own fields, set on
// those fields rather than on spec: the API server evaluates every rule of
// the CRD on every write of a session, its status writes included, and each
// step a rule takes down from the object it sits on (self.template.spec...)
// costs a copy of the schema it leaves, forty properties for a pod spec. A
// rule on the field itself takes no step, and is not evaluated at all when
// the field is absent: together these cost a status write of a realistic
// session a third of its API server time (docs/performance.md). The rules
// that compare the template with spec's own fields (spec.container,
// spec.image, ...) stay on spec, in types.go.
//
// Container names need no rule: containers is a list map keyed by name,
// which the API server keeps unique by itself.
var templateRules = []rule{
	{[]string{"metadata", "labels"},
		"!['app.kubernetes.io/name', 'app.kubernetes.io/instance', 'app.kubernetes.io/managed-by'].exists(k, k in self)",
		"spec.template.metadata.labels must not set app.kubernetes.io/name, app.kubernetes.io/instance or app.kubernetes.io/managed-by: the controller sets them to select the session's pods"},
	{[]string{"metadata", "annotations"},
		"!('games.example.com/profile-hash' in self)",
		"spec.template.metadata.annotations must not set games.example.com/profile-hash: the controller sets it to the hash of the profile the pods run"},
	{[]string{"spec", "volumes"},
		"self.all(v, v.name != 'profile')",
		"spec.template.spec.volumes must not have a volume named profile: the name is reserved for the profile revision the controller mounts; rename the volume (and its mounts)"},
	{[]string{"spec", "restartPolicy"},
		"self == 'Always'",
		"spec.template.spec.restartPolicy must be Always (or unset): a Deployment's pods always restart"},
	{[]string{"spec", "activeDeadlineSeconds"},
		"false",
		"spec.template.spec.activeDeadlineSeconds must not be set: a Deployment does not allow it; a game server that must end should exit by itself"},
	{[]string{"spec", "ephemeralContainers"},
		"false",
		"spec.template.spec.ephemeralContainers must not be set: ephemeral containers are added to running pods with kubectl debug, not to a template"},
	{[]string{"spec", "overhead"},
		"false",
		"spec.template.spec.overhead must not be set: the pod's RuntimeClass sets it, and pods with an overhead of their own are refused"},
	{[]string{"spec", "initContainers"},
		"self.all(c, has(c.image))",
		"each init container in spec.template.spec.initContainers needs an image"},
	{[]string{"spec"},
		"!has(self.initContainers) || self.initContainers.all(i, !self.containers.exists(c, c.name == i.name))",
		"a container name may appear only once across spec.template.spec.containers and initContainers"},
	{[]string{"spec", "containers", "[]", "ports"},
		"self.all(p, !has(p.name) || self.exists_one(q, has(q.name) && q.name == p.name))",
		"port names must be unique within each container of spec.template.spec.containers"},
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
		template := dig(v, "schema", "openAPIV3Schema", "properties", "spec", "properties", "template").(map[string]any)
		for _, r := range templateRules {
			schema, err := schemaAt(template, r.path)
			if err != nil {
				return err
			}
			rules, _ := schema["x-kubernetes-validations"].([]any)
			schema["x-kubernetes-validations"] = append(rules, map[string]any{"rule": r.rule, "message": r.message})
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
	schema, err := schemaAt(podSpec, l.path)
	if err != nil {
		return fmt.Errorf("spec.template.spec: %w", err)
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

// schemaAt is the schema path leads to from root: property names, and "[]"
// for list items.
func schemaAt(root map[string]any, path []string) (map[string]any, error) {
	schema := root
	for _, step := range path {
		var next any
		if step == "[]" {
			next = schema["items"]
		} else {
			next = dig(schema, "properties", step)
		}
		s, ok := next.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("no schema at %v", path)
		}
		schema = s
	}
	return schema, nil
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
