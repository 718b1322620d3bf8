package deployments_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const chartDir = "helm/outbox-bridge"

// helm finds the helm binary (.ci/helm installs it from the Go module
// proxy into $(go env GOPATH)/bin). Without it the Helm tests are skipped,
// and fail in CI.
func helm(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		if p := filepath.Join(strings.TrimSpace(string(out)), "bin", "helm"); fileExists(p) {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no helm on PATH or in $(go env GOPATH)/bin (CI=true): .ci/helm installs it")
	}
	t.Skip("no helm on PATH: go install helm.sh/helm/v3/cmd/helm@v3.22.0 (or run .ci/helm)")
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// helmRendered is a Helm render: the kustomize base's kinds and the migrate hook.
type helmRendered struct {
	rendered
	migrate batchv1.Job
}

// renderHelm runs helm template over the chart as release outbox-bridge in
// namespace orders with the values files given, and decodes every resource
// strictly, as render does for kustomize.
func renderHelm(t *testing.T, values ...string) helmRendered {
	t.Helper()
	args := []string{"template", "outbox-bridge", chartDir, "-n", "orders"}
	for _, v := range values {
		args = append(args, "-f", v)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(helm(t), args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var r helmRendered
	targets := map[string]any{
		"apps/v1/Deployment":                      &r.deployment,
		"v1/ConfigMap":                            &r.configMap,
		"v1/Service":                              &r.service,
		"policy/v1/PodDisruptionBudget":           &r.pdb,
		"monitoring.coreos.com/v1/ServiceMonitor": &r.serviceMonitor,
		"jetstream.nats.io/v1beta2/Stream":        &r.stream,
		"batch/v1/Job":                            &r.migrate,
		"monitoring.coreos.com/v1/PrometheusRule": &json.RawMessage{},
	}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		data, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("helm template output is not YAML: %v\n%s", err, doc)
		}
		var tm metav1.TypeMeta
		if err := json.Unmarshal(data, &tm); err != nil || tm.Kind == "" {
			continue // a comment-only document
		}
		key := tm.APIVersion + "/" + tm.Kind
		target, ok := targets[key]
		if !ok {
			t.Fatalf("unexpected resource %s", key)
		}
		if raw, ok := target.(*json.RawMessage); ok {
			*raw = data
			continue
		}
		if err := strictDecode(data, target); err != nil {
			t.Fatalf("%s does not decode strictly: %v", key, err)
		}
	}
	return r
}

// podSpecOf is what of a Deployment's pod template must be the same in both
// renders: everything but names and labels, which Helm derives from the
// release (app.kubernetes.io/instance) and kustomize from the base, and the
// ConfigMap's name (kustomize's carries a content hash, Helm's a checksum
// annotation on the pod).
func podSpecOf(t *testing.T, r *rendered) map[string]any {
	t.Helper()
	d := r.deployment.DeepCopy()
	d.ObjectMeta = metav1.ObjectMeta{}
	d.Spec.Selector = nil
	d.Spec.Template.ObjectMeta = metav1.ObjectMeta{}
	for i := range d.Spec.Template.Spec.TopologySpreadConstraints {
		d.Spec.Template.Spec.TopologySpreadConstraints[i].LabelSelector = nil
	}
	for i := range d.Spec.Template.Spec.Containers[0].EnvFrom {
		d.Spec.Template.Spec.Containers[0].EnvFrom[i].ConfigMapRef.Name = "the ConfigMap"
	}
	data, err := json.Marshal(d.Spec)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestHelmMatchesKustomize renders the chart with its defaults and with the
// production example, and the kustomize base and its production overlay:
// the Deployments are the same but for names and labels (replicas,
// strategy, probes, resources, security contexts, volumes, the secrets by
// reference, the spread), and the relay loads the same configuration from
// either container's environment. Each selector selects its own pods.
func TestHelmMatchesKustomize(t *testing.T) {
	for _, c := range []struct {
		name, kustomize string
		values          []string
	}{
		{"defaults", "kubernetes", nil},
		{"production", "examples/production", []string{"helm/examples/production-values.yaml"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := renderHelm(t, c.values...)
			k := render(t, c.kustomize)
			if got, want := podSpecOf(t, &h.rendered), podSpecOf(t, &k); !reflect.DeepEqual(got, want) {
				gotJSON, _ := json.MarshalIndent(got, "", "  ")
				wantJSON, _ := json.MarshalIndent(want, "", "  ")
				t.Fatalf("the Helm Deployment differs from kustomize's\nhelm:\n%s\nkustomize:\n%s", gotJSON, wantJSON)
			}
			if got, want := loadConfig(t, environ(t, &h.rendered)), loadConfig(t, environ(t, &k)); !reflect.DeepEqual(got, want) {
				t.Fatalf("the relay's configuration differs:\nhelm %+v\nkustomize %+v", got, want)
			}
			selects(t, "Deployment selector", h.deployment.Spec.Selector, h.deployment.Spec.Template.Labels)
			selects(t, "PodDisruptionBudget", h.pdb.Spec.Selector, h.deployment.Spec.Template.Labels)
			selects(t, "Service", &metav1.LabelSelector{MatchLabels: h.service.Spec.Selector}, h.deployment.Spec.Template.Labels)
			if h.pdb.Spec.MinAvailable.String() != k.pdb.Spec.MinAvailable.String() {
				t.Errorf("PodDisruptionBudget minAvailable %s, kustomize %s", h.pdb.Spec.MinAvailable.String(), k.pdb.Spec.MinAvailable.String())
			}
			if c.values != nil && !reflect.DeepEqual(h.stream.Spec, k.stream.Spec) {
				t.Errorf("the Stream differs: helm %+v, kustomize %+v", h.stream.Spec, k.stream.Spec)
			}
			// The migrate hook: the same image, database Secret and settings, bridge migrate.
			job := h.migrate.Spec.Template.Spec.Containers[0]
			relay := h.deployment.Spec.Template.Spec.Containers[0]
			if job.Image != relay.Image || !reflect.DeepEqual(job.Args, []string{"migrate"}) || job.Env[0].ValueFrom.SecretKeyRef.Name != databaseSecret {
				t.Errorf("migrate hook: image %s args %v env %v", job.Image, job.Args, job.Env)
			}
			if h.migrate.Annotations["helm.sh/hook"] != "pre-install,pre-upgrade" {
				t.Errorf("migrate hook annotations %v", h.migrate.Annotations)
			}
		})
	}
}

// TestHelmAlertsAreTheMonitoringAlerts: the chart's PrometheusRule reads
// files/alerts.yaml, a copy of monitoring/alerts.yaml (Helm reads no file
// outside the chart).
func TestHelmAlertsAreTheMonitoringAlerts(t *testing.T) {
	chart, err := os.ReadFile(filepath.Join(chartDir, "files", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	mon, err := os.ReadFile(filepath.Join("monitoring", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(chart, mon) {
		t.Fatalf("%s/files/alerts.yaml differs from monitoring/alerts.yaml: cp monitoring/alerts.yaml %s/files/", chartDir, chartDir)
	}
}

// TestHelmRefusesUnsafeValues: values that would put a secret in the
// ConfigMap, start a console without its token, move http.listen away
// from the probes, or block every node drain are refused at render time.
func TestHelmRefusesUnsafeValues(t *testing.T) {
	for _, set := range [][]string{
		{"config.BRIDGE_DATABASE_URL=postgres://u:p@h/db"},
		{"config.BRIDGE_WAL_REPLICATION_URL=postgres://u:p@h/db"},
		{"config.BRIDGE_UI_TOKEN=0123456789abcdef0123"},
		{"config.BRIDGE_HTTP_LISTEN=:9090"},
		{"ui.enabled=true"},
		{"replicaCount=1"},
		{"image.tag=1.0;rm"},
	} {
		args := []string{"template", "outbox-bridge", chartDir}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		if out, err := exec.Command(helm(t), args...).CombinedOutput(); err == nil {
			t.Errorf("helm template --set %v rendered:\n%.300s", set, out)
		}
	}
	// The console with its token from a Secret renders, and the token is a secretKeyRef.
	args := []string{"template", "outbox-bridge", chartDir, "--set", "ui.enabled=true", "--set", "ui.tokenSecretName=console"}
	out, err := exec.Command(helm(t), args...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "name: BRIDGE_UI_TOKEN") || !strings.Contains(string(out), "name: console") {
		t.Fatalf("helm %v: %v\n%s", args, err, out)
	}
}
