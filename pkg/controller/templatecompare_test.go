package controller

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/randfill"

	"github.com/example/gamesession-controller/internal/testutil"
)

// sameTemplate's shortcut is sound only if the protobuf encoding sees every
// field the reflective comparison does. This fills every field of a pod
// template (no nil pointer, no empty slice or map), changes each leaf in
// turn, one per copy, and checks that whenever the reflective comparison
// tells the copy apart, the encodings differ too, and that sameTemplate
// agrees with the reflective comparison throughout. A field that a newer
// k8s.io/api adds without a protobuf tag would fail it.
func TestSameTemplateAgreesWithSemanticEquality(t *testing.T) {
	// One seed: the walk covers every field whatever the values, and each
	// of its ~1,500 changes costs a copy and two comparisons of the whole.
	filler := randfill.NewWithSeed(1).NilChance(0).NumElements(1, 1).Funcs(
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewQuantity(c.Int63n(1000)+1, resource.DecimalSI)
		},
		func(ts *metav1.Time, c randfill.Continue) { *ts = metav1.Unix(c.Int63n(1<<31), 0) },
	)
	var filled corev1.PodTemplateSpec
	filler.Fill(&filled)
	checkEveryLeafChange(t, "every field filled", &filled, 1500)
	checkEveryLeafChange(t, "GameServerTemplate", testutil.GameServerTemplate("arena-1"), 150)
}

func checkEveryLeafChange(t *testing.T, name string, template *corev1.PodTemplateSpec, minLeaves int) {
	t.Helper()
	if !sameTemplate(template, template.DeepCopy()) {
		t.Fatalf("%s: a template and its copy compare unequal", name)
	}
	leaves := 0
	for ; ; leaves++ {
		changed := template.DeepCopy()
		n := leaves
		if !changeLeaf(reflect.ValueOf(changed).Elem(), &n) {
			break
		}
		semantic := equality.Semantic.DeepEqual(template, changed)
		if got := sameTemplate(template, changed); got != semantic {
			t.Errorf("%s, leaf %d: sameTemplate %v, semantic equality %v", name, leaves, got, semantic)
		}
		a, errA := template.Marshal()
		b, errB := changed.Marshal()
		if errA != nil || errB != nil {
			t.Fatalf("%s: encoding: %v, %v", name, errA, errB)
		}
		if !semantic && slices.Equal(a, b) {
			t.Errorf("%s, leaf %d: a change the encoding does not show (a field without a protobuf tag?)", name, leaves)
		}
	}
	// The walk must have reached the depth of a pod template: every
	// container field, every volume source.
	if leaves < minLeaves {
		t.Errorf("%s: %d leaves changed, want at least %d", name, leaves, minLeaves)
	}
	t.Logf("%s: %d leaf changes checked", name, leaves)
}

var (
	quantityType = reflect.TypeFor[resource.Quantity]()
	timeType     = reflect.TypeFor[metav1.Time]()
)

// changeLeaf changes the n-th leaf of v in a fixed walk order and reports
// whether there was one. A leaf is a scalar, a Quantity, a Time, a byte
// slice, and also each pointer (made nil), each non-empty slice (its last
// element dropped) and each map key (deleted).
func changeLeaf(v reflect.Value, n *int) bool {
	here := func() bool {
		if *n == 0 {
			return true
		}
		*n--
		return false
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return false
		}
		if here() {
			v.SetZero()
			return true
		}
		return changeLeaf(v.Elem(), n)
	case reflect.Struct:
		switch v.Type() {
		case quantityType:
			if here() {
				q := v.Interface().(resource.Quantity)
				q.Add(resource.MustParse("1"))
				v.Set(reflect.ValueOf(q))
				return true
			}
			return false
		case timeType:
			if here() {
				v.Set(reflect.ValueOf(metav1.NewTime(v.Interface().(metav1.Time).Add(time.Second))))
				return true
			}
			return false
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && changeLeaf(v.Field(i), n) {
				return true
			}
		}
		return false
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			if here() {
				v.SetBytes(append(slices.Clone(v.Bytes()), 'x'))
				return true
			}
			return false
		}
		if v.Len() > 0 && here() {
			v.Set(v.Slice(0, v.Len()-1))
			return true
		}
		for i := range v.Len() {
			if changeLeaf(v.Index(i), n) {
				return true
			}
		}
		return false
	case reflect.Map:
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int {
			return strings.Compare(fmt.Sprint(a.Interface()), fmt.Sprint(b.Interface()))
		})
		for _, k := range keys {
			if here() {
				v.SetMapIndex(k, reflect.Value{})
				return true
			}
			elem := reflect.New(v.Type().Elem()).Elem()
			elem.Set(v.MapIndex(k))
			if changeLeaf(elem, n) {
				v.SetMapIndex(k, elem)
				return true
			}
		}
		return false
	case reflect.String:
		if here() {
			v.SetString(v.String() + "x")
			return true
		}
	case reflect.Bool:
		if here() {
			v.SetBool(!v.Bool())
			return true
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if here() {
			v.SetInt(v.Int() + 1)
			return true
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if here() {
			v.SetUint(v.Uint() + 1)
			return true
		}
	case reflect.Float32, reflect.Float64:
		if here() {
			v.SetFloat(v.Float() + 1)
			return true
		}
	}
	return false
}

// The comparison of equal templates, as in every sync after the one that
// wrote: the reflective walk against sameTemplate, side by side.
func BenchmarkTemplateComparison(b *testing.B) {
	observed := testutil.GameServerTemplate("arena-1")
	desired := observed.DeepCopy()
	b.Run("semantic", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !equality.Semantic.DeepEqual(observed, desired) {
				b.Fatal("unequal")
			}
		}
	})
	b.Run("sameTemplate", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !sameTemplate(observed, desired) {
				b.Fatal("unequal")
			}
		}
	})
}
