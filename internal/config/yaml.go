package config

import (
	"bytes"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// YAML returns the configuration as a YAML document with the keys Load reads, in
// declaration order, durations as Go duration strings ("250ms", "5m"). Loading the output
// with --config gives back the same Config. Secrets are included: print c.Redacted().YAML().
func (c *Config) YAML() ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(toNode(reflect.ValueOf(c).Elem())); err != nil {
		return nil, fmt.Errorf("encode config as YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode config as YAML: %w", err)
	}
	return buf.Bytes(), nil
}

// toMap returns c as the nested map koanf holds, the keys YAML writes; an empty streams list
// is left out.
func toMap(c *Config) (map[string]any, error) {
	var m map[string]any
	if err := toNode(reflect.ValueOf(c).Elem()).Decode(&m); err != nil {
		return nil, fmt.Errorf("convert config to a map: %w", err)
	}
	if s, ok := m["streams"].([]any); ok && len(s) == 0 {
		delete(m, "streams")
	}
	return m, nil
}

// toNode converts a configuration value to a YAML node, following the koanf tags.
func toNode(v reflect.Value) *yaml.Node {
	if v.Type() == durationType {
		return scalar("!!str", fmtDuration(time.Duration(v.Int())))
	}
	if v.Type() == byteSizeType {
		s := ByteSize(v.Int()).String()
		if _, err := strconv.ParseInt(s, 10, 64); err == nil {
			return scalar("!!int", s)
		}
		return scalar("!!str", s)
	}
	switch v.Kind() {
	case reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for _, f := range fieldsOf(v.Type()) {
			n.Content = append(n.Content, scalar("!!str", f.key), toNode(v.Field(f.index)))
		}
		return n
	case reflect.Slice:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		if v.Type().Elem().Kind() == reflect.String {
			n.Style = yaml.FlowStyle
		}
		for i := range v.Len() {
			n.Content = append(n.Content, toNode(v.Index(i)))
		}
		return n
	case reflect.Int, reflect.Int64:
		return scalar("!!int", strconv.FormatInt(v.Int(), 10))
	case reflect.Bool:
		return scalar("!!bool", strconv.FormatBool(v.Bool()))
	default:
		return scalar("!!str", v.String())
	}
}

func scalar(tag, value string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
}

// fmtDuration is d.String() without zero trailing units: 5m instead of 5m0s, 24h instead
// of 24h0m0s. time.ParseDuration reads both.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
