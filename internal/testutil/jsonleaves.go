package testutil

import (
	"encoding/json"
	"fmt"
	"strings"
)

// JSONLeaves flattens v's JSON form into its leaves by path
// (spec.containers[0].ports[1].protocol), each with its JSON value. With
// keepEmpty, an empty object or list is a leaf of its own ("{}", "[]"), so
// that a diff shows one appearing; without, it has no leaf, so that adding
// values to it reads as only adding.
func JSONLeaves(v any, keepEmpty bool) map[string]string {
	data, err := json.Marshal(v)
	if err != nil {
		return map[string]string{"": fmt.Sprintf("(no JSON: %v)", err)}
	}
	var tree any
	_ = json.Unmarshal(data, &tree)
	leaves := map[string]string{}
	var walk func(path string, node any)
	walk = func(path string, node any) {
		switch n := node.(type) {
		case map[string]any:
			if keepEmpty && len(n) == 0 {
				leaves[path] = "{}"
			}
			for k, child := range n {
				walk(strings.TrimPrefix(path+"."+k, "."), child)
			}
		case []any:
			if keepEmpty && len(n) == 0 {
				leaves[path] = "[]"
			}
			for i, child := range n {
				walk(fmt.Sprintf("%s[%d]", path, i), child)
			}
		default:
			leaf, _ := json.Marshal(n)
			leaves[path] = string(leaf)
		}
	}
	walk("", tree)
	return leaves
}
