package config

// Strict keys (issue #33, "Strict keys"): a stack file's keys are matched
// exactly. encoding/json matches an object key to a struct field
// case-insensitively when no exact match exists (Go's encoding/json
// documentation, "Unmarshal": "preferring an exact match but also
// accepting a case-insensitive match"), so on its own `adoptid` or
// `ADOPTID` would silently set nodes[i].adoptId, and DisallowUnknownFields
// never sees them. exactKeys walks the raw value against the target type
// before json decodes it and refuses every key that is not a field's exact
// name, at any depth.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// exactKeys reports each object key in b that names no field of t
// exactly, at the path of the object holding it (relative to the decoded
// value: "", ".libvirt", "[2].chart"), and each field tagged with a
// default that is written out as its zero value (explicitZero). Keys of
// maps (free-form: values, adopt, secretValues) are the user's own and are
// not checked; values that are not valid JSON are left to the decoder.
func exactKeys(b []byte, t reflect.Type) []keyProblem {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil
	}
	var out []keyProblem
	walkExact(v, t, "", &out)
	return out
}

func walkExact(v any, t reflect.Type, at string, out *[]keyProblem) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		fields := jsonFields(t)
		for _, k := range sortedKeys(m) {
			f, ok := fields[k]
			if !ok {
				*out = append(*out, keyProblem{at, unknownKey(k, fields)})
				continue
			}
			if msg, zero := explicitZero(m[k], f); zero {
				*out = append(*out, keyProblem{at + "." + k, msg})
				continue
			}
			walkExact(m[k], f.Type, at+"."+k, out)
		}
	case reflect.Slice, reflect.Array:
		l, ok := v.([]any)
		if !ok {
			return
		}
		for i, e := range l {
			walkExact(e, t.Elem(), fmt.Sprintf("%s[%d]", at, i), out)
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		for _, k := range sortedKeys(m) {
			walkExact(m[k], t.Elem(), fmt.Sprintf("%s[%s]", at, k), out)
		}
	}
}

// unknownKey words the problem; a key that differs from a field only in
// case names the field it is not.
func unknownKey(k string, fields map[string]reflect.StructField) string {
	for name := range fields {
		if strings.EqualFold(name, k) {
			return fmt.Sprintf("unknown key %q (keys are matched exactly: did you mean %q?)", k, name)
		}
	}
	return fmt.Sprintf("unknown key %q", k)
}

// keyProblem is one unknown key: the path of its object and the message.
type keyProblem struct{ at, msg string }

// jsonFields maps the exact JSON name of each decoded field of struct t to
// the field, as encoding/json names them: the tag's name, else the Go field
// name; "-" and unexported fields are not decoded; embedded structs without
// a tag contribute their fields.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" && !strings.HasPrefix(tag, "-,") {
			continue
		}
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				for k, v := range jsonFields(et) {
					out[k] = v
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f
	}
	return out
}

// explicitZero reports a field that applyDefaults fills when it is zero
// (tagged `default:"<what>"`) written out as its zero value: null, 0, ""
// or an empty list. Decoded, it would be the default, not what the stack
// file says (issue #49: an explicit 0 for a size became the default); it
// is refused, never defaulted. false, {} and the zero of a field without
// a default are kept as written.
func explicitZero(v any, f reflect.StructField) (string, bool) {
	def, ok := f.Tag.Lookup("default")
	if !ok {
		return "", false
	}
	zero := v == nil
	if f.Type.Kind() != reflect.Pointer { // a pointer keeps what is written ("" included); only null is unset
		switch t := v.(type) {
		case json.Number:
			n, err := t.Float64()
			zero = err == nil && n == 0
		case string:
			zero = t == ""
		case []any:
			zero = len(t) == 0
		}
	}
	if !zero {
		return "", false
	}
	shown, _ := json.Marshal(v)
	return fmt.Sprintf("%s is what an unset key reads as, so the program would use the default (%s), not what is written; remove the key for the default, or give the value you mean", shown, def), true
}
