package config

import (
	"reflect"
	"strings"
	"sync"
	"time"
)

var (
	durationType = reflect.TypeFor[time.Duration]()
	byteSizeType = reflect.TypeFor[ByteSize]()
	configType   = reflect.TypeFor[Config]()
	stringsType  = reflect.TypeFor[[]string]()
)

// field is one koanf-tagged struct field.
type field struct {
	key   string
	index int
	typ   reflect.Type
}

// fieldsOf lists the koanf-tagged fields of struct type t in declaration order.
func fieldsOf(t reflect.Type) []field {
	out := make([]field, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		key := f.Tag.Get("koanf")
		if key == "" || key == "-" || !f.IsExported() {
			continue
		}
		out = append(out, field{key: key, index: i, typ: f.Type})
	}
	return out
}

// isSection reports whether t is a nested mapping of keys (a struct other than a duration).
func isSection(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && t != durationType
}

// keyNames is the comma-separated list of the keys of struct type t.
func keyNames(t reflect.Type) string {
	fs := fieldsOf(t)
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.key
	}
	return strings.Join(names, ", ")
}

// leafKeys lists the dotted paths of every scalar key of t, in declaration order, and
// listKeys those of the list keys (streams); lists have no environment variable.
func leafKeys(t reflect.Type, prefix string) []string {
	leaves, _ := keyPaths(t, prefix)
	return leaves
}

func listKeys(t reflect.Type, prefix string) []string {
	_, lists := keyPaths(t, prefix)
	return lists
}

// keyPaths walks t once and returns the dotted paths of its scalar keys and of its
// list keys, in declaration order.
func keyPaths(t reflect.Type, prefix string) (leaves, lists []string) {
	for _, f := range fieldsOf(t) {
		key := f.key
		if prefix != "" {
			key = prefix + "." + key
		}
		switch {
		case isSection(f.typ):
			l, ls := keyPaths(f.typ, key)
			leaves, lists = append(leaves, l...), append(lists, ls...)
		case f.typ.Kind() == reflect.Slice && isSection(f.typ.Elem()):
			lists = append(lists, key)
		default:
			leaves = append(leaves, key)
		}
	}
	return leaves, lists
}

// EnvPrefix starts the name of every environment variable of the configuration.
const EnvPrefix = "BRIDGE_"

// EnvName returns the environment variable of a dotted key: BRIDGE_ + the path in upper
// snake case ("relay.inflight_timeout" → "BRIDGE_RELAY_INFLIGHT_TIMEOUT").
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// envKeys maps each known variable name to its dotted key. Names are computed from the
// known keys and matched whole, because keys themselves contain underscores.
var envKeys = sync.OnceValue(func() map[string]string {
	keys := leafKeys(configType, "")
	m := make(map[string]string, len(keys))
	for _, k := range keys {
		name := EnvName(k)
		if prev, dup := m[name]; dup {
			panic("config: keys " + prev + " and " + k + " share the variable " + name)
		}
		m[name] = k
	}
	return m
})
