package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestConfigurationDocumentsEveryKey checks docs/CONFIGURATION.md's table
// against the keys of Config, so that a key added anywhere is documented:
// every scalar key has a row that names it, with its environment variable
// (or a shared prefix ending in …, as BRIDGE_NATS_TLS_… for the TLS files);
// every list key has a row that names it and each field of its elements.
func TestConfigurationDocumentsEveryKey(t *testing.T) {
	rows := readmeConfigRows(t)
	row := func(key string) []string {
		for _, r := range rows {
			if strings.Contains(r[0], "`"+key+"`") {
				return r
			}
		}
		return nil
	}
	leaves, lists := keyPaths(configType, "")
	for _, key := range leaves {
		r := row(key)
		if r == nil {
			t.Errorf("docs/CONFIGURATION.md's table has no row for %s", key)
			continue
		}
		env := EnvName(key)
		if !strings.Contains(r[1], "`"+env+"`") && !sharedPrefix(r[1], env) {
			t.Errorf("docs/CONFIGURATION.md's row for %s does not name its variable %s: %q", key, env, r[1])
		}
	}
	for _, key := range lists {
		r := row(key)
		if r == nil {
			t.Errorf("docs/CONFIGURATION.md's table has no row for %s", key)
			continue
		}
		f, _ := configType.FieldByNameFunc(func(name string) bool {
			sf, _ := configType.FieldByName(name)
			return sf.Tag.Get("koanf") == key
		})
		for _, field := range fieldsOf(elem(f.Type)) {
			if !strings.Contains(r[0], "`"+field.key+"`") {
				t.Errorf("docs/CONFIGURATION.md's row for %s does not name the field %s of its elements: %q", key, field.key, r[0])
			}
		}
	}
}

func elem(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Slice || t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// sharedPrefix reports whether cell names env by a prefix: `BRIDGE_NATS_…`.
func sharedPrefix(cell, env string) bool {
	for _, part := range strings.Split(cell, "`") {
		if prefix, ok := strings.CutSuffix(part, "…"); ok && prefix != "" && strings.HasPrefix(env, prefix) {
			return true
		}
	}
	return false
}

// readmeConfigRows returns the cells of the rows of the table under the
// docs/CONFIGURATION.md's title, header and separator left out.
func readmeConfigRows(t *testing.T) [][]string {
	t.Helper()
	data, err := os.ReadFile("../../docs/CONFIGURATION.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "# Configuration\n")
	if !ok {
		t.Fatal(`docs/CONFIGURATION.md has no "# Configuration" title`)
	}
	var rows [][]string
	for line := range strings.Lines(section) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") || strings.HasPrefix(line, "| YAML key") {
			continue
		}
		cells := strings.Split(strings.Trim(strings.ReplaceAll(line, `\|`, "\x00"), "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(strings.ReplaceAll(cells[i], "\x00", "|"))
		}
		if len(cells) < 5 {
			t.Fatalf("docs/CONFIGURATION.md row with %d cells, want 5: %s", len(cells), line)
		}
		rows = append(rows, cells)
	}
	if len(rows) == 0 {
		t.Fatal("docs/CONFIGURATION.md has no table")
	}
	return rows
}
