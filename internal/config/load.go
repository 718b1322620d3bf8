package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/posflag"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"
)

// Load builds the configuration from four layers, each overriding the one before:
// Default(), the YAML file named by --config (when fs has it and it is set), the BRIDGE_*
// variables of environ (os.Environ() shaped, "NAME=value"; a variable set to the empty
// string sets the empty string) and the flags of fs the user set (fs.Changed; values of
// --ensure-stream replace streams). fs may be nil. The result is validated.
//
// Every error is bad configuration or usage (exit code 2): an *Error naming the key, the
// value and what is allowed (an unknown YAML key, a value of the wrong type, a value
// Validate refuses), or a failure to read or parse the file. Unknown BRIDGE_* variables are
// ignored; UnknownEnv lists them.
func Load(fs *pflag.FlagSet, environ []string) (*Config, error) {
	ko := koanf.New(".")

	def := Default()
	defaults, err := toMap(&def)
	if err != nil {
		return nil, fmt.Errorf("load defaults: %w", err)
	}
	if err := ko.Load(confmap.Provider(defaults, ""), nil); err != nil {
		return nil, fmt.Errorf("load defaults: %w", err)
	}

	if path := flagString(fs, flagConfig); path != "" {
		fk := koanf.New(".")
		if err := fk.Load(file.Provider(path), yaml.Parser()); err != nil {
			return nil, fmt.Errorf("read config file %s: %w", path, err)
		}
		if err := checkKeys(fk.Raw(), configType, ""); err != nil {
			return nil, err
		}
		if err := ko.Merge(fk); err != nil {
			return nil, fmt.Errorf("merge config file %s: %w", path, err)
		}
	}

	if err := ko.Load(confmap.Provider(envMap(environ), "."), nil); err != nil {
		return nil, fmt.Errorf("load environment: %w", err)
	}

	var ensure []Stream
	var ensureValues []string
	if fs != nil {
		p := posflag.ProviderWithFlag(fs, ".", nil, func(f *pflag.Flag) (string, any) {
			key, ok := flagKeys[f.Name]
			if !ok || f.Name == flagTable {
				return "", nil
			}
			return key, f.Value.String()
		})
		if err := ko.Load(p, nil); err != nil {
			return nil, fmt.Errorf("load flags: %w", err)
		}
		if f := fs.Lookup(flagTable); f != nil && f.Changed {
			// --table, repeatable, stands for both keys: one name is
			// database.table (normalizeTables), several or a pattern
			// database.tables.
			// GetSlice, not GetStringArray, which reads one empty value
			// back as none (it parses the flag's printed form).
			values := f.Value.(pflag.SliceValue).GetSlice()
			if i := slices.IndexFunc(values, func(v string) bool { return strings.TrimSpace(v) == "" }); i >= 0 {
				return nil, &Error{Key: "database.table", Value: values[i], Allowed: "must not be empty (--table ''): give a table name or a pattern"}
			}
			if err := ko.Set("database.table", TableDefault); err != nil {
				return nil, err
			}
			if err := ko.Set("database.tables", values); err != nil {
				return nil, err
			}
		}
		if f := fs.Lookup(flagEnsureStream); f != nil && f.Changed {
			values, err := fs.GetStringArray(flagEnsureStream)
			if err != nil {
				return nil, fmt.Errorf("read --%s: %w", flagEnsureStream, err)
			}
			for _, v := range values {
				s, err := ParseStreamFlag(v)
				if err != nil {
					return nil, err
				}
				ensure = append(ensure, s)
				ensureValues = append(ensureValues, v)
			}
		}
	}

	if err := fillStreamDefaults(ko); err != nil {
		return nil, err
	}

	cfg := def
	if err := unmarshal(ko, &cfg); err != nil {
		return nil, err
	}
	if ensure != nil {
		cfg.Streams = ensure
	}
	if len(cfg.Streams) == 0 {
		cfg.Streams = nil
	}
	if err := cfg.normalizeTables(); err != nil {
		return nil, err
	}
	if cfg.Relay.Owner == "" { // as `bridge config` prints the default
		cfg.Relay.Owner = defaultOwner()
	}
	if err := cfg.Validate(); err != nil {
		if ensure != nil {
			return nil, inFlagTerms(err, ensureValues)
		}
		return nil, err
	}
	return &cfg, nil
}

// streamPath matches a path into streams: streams[i], streams[i].subjects[j], streams[i].key.
var streamPath = regexp.MustCompile(`streams\[(\d+)\](?:\.subjects\[(\d+)\]|\.([a-z_]+))?`)

// inFlagTerms rewrites an *Error of Validate about streams given with --ensure-stream (values,
// in order) so that it names the flag and its value rather than a YAML path the user never
// wrote: streams[1].subjects[0] becomes `--ensure-stream OTHER:a (subject 1)`. Other errors
// are returned as they are.
func inFlagTerms(err error, values []string) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	rewrite := func(text string) string {
		return streamPath.ReplaceAllStringFunc(text, func(m string) string {
			sub := streamPath.FindStringSubmatch(m)
			i, _ := strconv.Atoi(sub[1])
			if i >= len(values) {
				return m
			}
			flag := "--" + flagEnsureStream + " " + values[i]
			switch {
			case sub[2] != "":
				j, _ := strconv.Atoi(sub[2])
				return fmt.Sprintf("%s (subject %d)", flag, j+1)
			case sub[3] == "name":
				return flag + " (the name)"
			case sub[3] != "":
				return fmt.Sprintf("%s (its %s, a default of the flag)", flag, sub[3])
			}
			return flag
		})
	}
	out := *e
	out.Key, out.Allowed = rewrite(e.Key), rewrite(e.Allowed)
	return &out
}

// UnknownEnv returns the names of the BRIDGE_* variables in environ that name no key, sorted,
// so that the caller can warn about them. Kubernetes injects BRIDGE_SERVICE_HOST and the like
// for a Service named bridge, so they are not an error.
func UnknownEnv(environ []string) []string {
	known := envKeys()
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix) {
			continue
		}
		if _, ok := known[name]; !ok && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// EnvHint says why a BRIDGE_* variable that UnknownEnv lists is not read when it names a
// real key that has no variable, such as BRIDGE_STREAMS (or BRIDGE_STREAMS_0_NAME): lists
// are set in the YAML file, and streams also with --ensure-stream. It returns "" for any
// other name, which is then most likely misspelled.
func EnvHint(name string) string {
	for _, key := range listKeys(configType, "") {
		prefix := EnvName(key)
		if name != prefix && !strings.HasPrefix(name, prefix+"_") {
			continue
		}
		hint := key + " has no environment variable; set it in the YAML file (--config)"
		if key == "streams" {
			hint += " or with --" + flagEnsureStream + " NAME:SUBJ[,SUBJ]"
		}
		return hint
	}
	return ""
}

// envMap returns the known BRIDGE_* variables of environ as a flat map of dotted keys.
func envMap(environ []string) map[string]any {
	known := envKeys()
	out := make(map[string]any)
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		if key, ok := known[name]; ok {
			out[key] = value
		}
	}
	return out
}

// flagString returns the value of the string flag name, or "" when fs or the flag is missing.
func flagString(fs *pflag.FlagSet, name string) string {
	if fs == nil {
		return ""
	}
	f := fs.Lookup(name)
	if f == nil {
		return ""
	}
	return f.Value.String()
}

// checkKeys refuses the keys of m that are not fields of struct type t: it returns every one
// of them at once, as *Error values joined with errors.Join (one line each, in the order of
// the file's sorted paths), each naming the key and the keys known at its level, so that a
// file with several mistakes is fixed in one round. It descends into sections and into the
// items of streams. nil when every key is known.
func checkKeys(m map[string]any, t reflect.Type, prefix string) error {
	return errors.Join(unknownKeys(m, t, prefix)...)
}

// unknownKeys returns an *Error for each key of m, at any depth, that names no field of t.
func unknownKeys(m map[string]any, t reflect.Type, prefix string) []error {
	fields := make(map[string]field)
	for _, f := range fieldsOf(t) {
		fields[f.key] = f
	}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(m)) {
		path := k
		if prefix != "" {
			path = prefix + "." + k
		}
		f, ok := fields[k]
		if !ok {
			where := "known top-level keys: "
			if prefix != "" {
				where = "known keys under " + prefix + ": "
			}
			errs = append(errs, &Error{Key: path, Allowed: "unknown key; " + where + keyNames(t), noValue: true})
			continue
		}
		switch v := m[k].(type) {
		case map[string]any:
			if isSection(f.typ) {
				errs = append(errs, unknownKeys(v, f.typ, path)...)
			}
		case []any:
			if f.typ.Kind() == reflect.Slice && isSection(f.typ.Elem()) {
				for i, item := range v {
					if im, ok := item.(map[string]any); ok {
						errs = append(errs, unknownKeys(im, f.typ.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
					}
				}
			}
		}
	}
	return errs
}

// fillStreamDefaults adds the stream defaults to each item of streams that leaves out
// duplicates, replicas or storage. A key given, even as zero, is kept for Validate to judge.
func fillStreamDefaults(ko *koanf.Koanf) error {
	items, ok := ko.Get("streams").([]any)
	if !ok || len(items) == 0 {
		return nil
	}
	filled := make([]any, len(items))
	for i, item := range items {
		m, ok := item.(map[string]any)
		if !ok {
			filled[i] = item
			continue
		}
		m = maps.Clone(m)
		for k, v := range map[string]any{
			"duplicates": fmtDuration(StreamDuplicatesDefault),
			"replicas":   StreamReplicasDefault,
			"storage":    StreamStorageDefault,
		} {
			if _, set := m[k]; !set {
				m[k] = v
			}
		}
		filled[i] = m
	}
	if err := ko.Load(confmap.Provider(map[string]any{"streams": filled}, ""), nil); err != nil {
		return fmt.Errorf("fill stream defaults: %w", err)
	}
	return nil
}

// unmarshal decodes the merged layers into cfg with mapstructure: durations as Go duration
// strings, strict integers and booleans, and no unused key. A decoding failure becomes an
// *Error naming the key and the value.
func unmarshal(ko *koanf.Koanf, cfg *Config) error {
	err := ko.UnmarshalWithConf("", cfg, koanf.UnmarshalConf{
		DecoderConfig: &mapstructure.DecoderConfig{
			DecodeHook:       mapstructure.DecodeHookFuncType(scalarHook),
			WeaklyTypedInput: true,
			ErrorUnused:      true,
			TagName:          "koanf",
		},
	})
	if err == nil {
		return nil
	}
	var de *mapstructure.DecodeError
	if !errors.As(err, &de) {
		return fmt.Errorf("decode config: %w", err)
	}
	e := &Error{Key: de.Name(), Allowed: de.Unwrap().Error()}
	var (
		te *typeError
		pe *mapstructure.ParseError
		ue *mapstructure.UnconvertibleTypeError
	)
	switch {
	case errors.As(de, &te):
		e.Value, e.Allowed = te.value, te.allowed
	case errors.As(de, &pe):
		e.Value, e.Allowed = formatValue(pe.Value), allowedFor(pe.Expected.Type())
	case errors.As(de, &ue):
		e.Value, e.Allowed = formatValue(ue.Value), allowedFor(ue.Expected.Type())
	default:
		e.noValue = true
	}
	return e
}

// typeError is a value a decode hook could not convert to the field's type.
type typeError struct {
	value, allowed string
}

func (e *typeError) Error() string { return fmt.Sprintf("%q: %s", e.value, e.allowed) }

// scalarHook converts a value from YAML, the environment or a flag to the field's type,
// more strictly than mapstructure's weak typing: a duration is a Go duration string ("30s";
// a bare 0 is accepted), an integer is a whole number, a boolean is true or false, a string
// is a scalar, a section is a mapping and streams is a list.
func scalarHook(from, to reflect.Type, data any) (any, error) {
	switch {
	case to == durationType:
		switch v := data.(type) {
		case time.Duration:
			return v, nil
		case string:
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil {
				return nil, &typeError{value: v, allowed: allowedFor(to)}
			}
			return d, nil
		default:
			if n, ok := wholeNumber(data); ok && n == 0 {
				return time.Duration(0), nil
			}
			return nil, &typeError{value: formatValue(data), allowed: allowedFor(to)}
		}
	case to == byteSizeType:
		switch v := data.(type) {
		case ByteSize:
			return v, nil
		case string:
			b, err := ParseByteSize(v)
			if err != nil {
				return nil, &typeError{value: v, allowed: allowedFor(to)}
			}
			return b, nil
		default:
			if n, ok := wholeNumber(data); ok {
				return ByteSize(n), nil
			}
			return nil, &typeError{value: formatValue(data), allowed: allowedFor(to)}
		}
	case to.Kind() == reflect.Int || to.Kind() == reflect.Int64:
		if s, ok := data.(string); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			if err != nil {
				return nil, &typeError{value: s, allowed: allowedFor(to)}
			}
			return n, nil
		}
		if n, ok := wholeNumber(data); ok {
			return n, nil
		}
		return nil, &typeError{value: formatValue(data), allowed: allowedFor(to)}
	case to.Kind() == reflect.Bool:
		switch v := data.(type) {
		case bool:
			return v, nil
		case string:
			b, err := strconv.ParseBool(strings.TrimSpace(v))
			if err != nil {
				return nil, &typeError{value: v, allowed: allowedFor(to)}
			}
			return b, nil
		default:
			return nil, &typeError{value: formatValue(data), allowed: allowedFor(to)}
		}
	case isSection(to):
		if from.Kind() != reflect.Map {
			return nil, &typeError{value: formatValue(data), allowed: allowedFor(to)}
		}
	case to.Kind() == reflect.Slice && isSection(to.Elem()):
		if from.Kind() != reflect.Slice && from.Kind() != reflect.Array {
			return nil, &typeError{value: formatValue(data), allowed: allowedFor(to)}
		}
	case to == stringsType:
		switch v := data.(type) {
		case string: // the environment, a flag: comma-separated; an empty item is refused by Validate
			var out []string
			for item := range strings.SplitSeq(v, ",") {
				out = append(out, strings.TrimSpace(item))
			}
			return out, nil
		case []string:
			return v, nil
		case []any:
			out := make([]string, len(v))
			for i, item := range v {
				s, ok := item.(string)
				if !ok {
					return nil, &typeError{value: formatValue(data), allowed: allowedFor(to)}
				}
				out[i] = s
			}
			return out, nil
		default:
			return nil, &typeError{value: formatValue(data), allowed: allowedFor(to)}
		}
	case to.Kind() == reflect.String:
		switch from.Kind() {
		case reflect.Map, reflect.Slice, reflect.Array, reflect.Struct:
			return nil, &typeError{value: formatValue(data), allowed: allowedFor(to)}
		case reflect.Bool:
			return strconv.FormatBool(data.(bool)), nil
		}
	}
	return data, nil
}

// wholeNumber returns data as an int64 when it is a number without a fraction.
func wholeNumber(data any) (int64, bool) {
	v := reflect.ValueOf(data)
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int(), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if v.Uint() > math.MaxInt64 {
			return 0, false
		}
		return int64(v.Uint()), true
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if f != math.Trunc(f) || f > math.MaxInt64 || f < math.MinInt64 {
			return 0, false
		}
		return int64(f), true
	}
	return 0, false
}

// allowedFor says which values a field of type t accepts.
func allowedFor(t reflect.Type) string {
	switch {
	case t == durationType:
		return "must be a duration such as 30s"
	case t == byteSizeType:
		return "must be a size in bytes such as 33554432, 32MiB or 64MB"
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		return "must be an integer"
	case t.Kind() == reflect.Bool:
		return "must be true or false"
	case t.Kind() == reflect.String:
		return "must be a string"
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		return "must be a list of strings"
	case t.Kind() == reflect.Slice && isSection(t.Elem()):
		return "must be a list of mappings with keys " + keyNames(t.Elem())
	case isSection(t):
		return "must be a mapping with keys " + keyNames(t)
	}
	return "must be a " + t.String()
}

// formatValue renders a decoded YAML, environment or flag value as text.
func formatValue(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	}
	return fmt.Sprint(v)
}
