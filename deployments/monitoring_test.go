package deployments_test

import (
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// ruleGroups is the part of a Prometheus rules file the tests read.
type ruleGroups struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// githubAnchor is the anchor GitHub gives a Markdown heading: lower case,
// punctuation dropped, spaces as hyphens.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestAlertRules checks deployments/monitoring's rules: promtool accepts
// them and its unit tests pass (each alert fires on its series and stays
// silent on healthy ones), every alert has both kinds of test and is
// explained in docs/OPERATIONS.md, and the PrometheusRule holds the same
// groups as the plain rules file. Without promtool (Debian package
// prometheus) the promtool part is skipped, except under CI, which
// installs it.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	var plain ruleGroups
	readYAML(t, "monitoring/alerts.yaml", &plain)
	var operator struct {
		APIVersion string            `yaml:"apiVersion"`
		Kind       string            `yaml:"kind"`
		Metadata   map[string]any    `yaml:"metadata"`
		Spec       ruleGroups        `yaml:"spec"`
		Status     map[string]string `yaml:"status"`
	}
	readYAML(t, "monitoring/prometheusrule.yaml", &operator)
	if operator.APIVersion != "monitoring.coreos.com/v1" || operator.Kind != "PrometheusRule" {
		t.Errorf("prometheusrule.yaml is a %s %s, want a monitoring.coreos.com/v1 PrometheusRule", operator.APIVersion, operator.Kind)
	}
	if !reflect.DeepEqual(plain, operator.Spec) {
		t.Error("prometheusrule.yaml's spec.groups differ from alerts.yaml's groups: change both")
	}

	tests, err := os.ReadFile("monitoring/alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for line := range strings.Lines(string(doc)) {
		if strings.HasPrefix(line, "#") {
			anchors[githubAnchor(strings.TrimLeft(line, "# "))] = true
		}
	}
	alerts := 0
	for _, g := range plain.Groups {
		for _, r := range g.Rules {
			alerts++
			if r.Labels["severity"] != "warning" && r.Labels["severity"] != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, r.Labels["severity"])
			}
			_, anchor, ok := strings.Cut(r.Annotations["runbook_url"], "docs/OPERATIONS.md#")
			if r.Annotations["summary"] == "" || !ok {
				t.Errorf("%s: wants a summary and a runbook_url into docs/OPERATIONS.md", r.Alert)
			} else if !anchors[anchor] {
				t.Errorf("%s: runbook_url names #%s, which is no heading of docs/OPERATIONS.md", r.Alert, anchor)
			}
			for _, want := range []string{"name: '" + r.Alert + " fires: ", "name: '" + r.Alert + " stays silent: "} {
				if !strings.Contains(string(tests), want) {
					t.Errorf("alerts_test.yaml has no test %q…", want)
				}
			}
			if !strings.Contains(string(doc), "`"+r.Alert+"`") {
				t.Errorf("docs/OPERATIONS.md does not explain the alert %s", r.Alert)
			}
		}
	}
	if alerts == 0 {
		t.Fatal("alerts.yaml has no alert")
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool is not installed; .ci/run must install it (Debian package prometheus)")
		}
		t.Skip("promtool is not installed (Debian package prometheus): the rules' unit tests are skipped")
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "monitoring"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
