package deployments_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/yaml"
)

// fencedBlocks returns the bodies of README.md's code blocks of language lang.
func fencedBlocks(t *testing.T, lang string) []string {
	t.Helper()
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?ms)^```" + regexp.QuoteMeta(lang) + "\n(.*?)^```$")
	var out []string
	for _, m := range re.FindAllStringSubmatch(string(data), -1) {
		out = append(out, m[1])
	}
	return out
}

// TestReadmeOverlayIsTheExample keeps the overlay shown in README.md the one
// TestExampleOverlay renders.
func TestReadmeOverlayIsTheExample(t *testing.T) {
	data, err := os.ReadFile("examples/production/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var body []string
	for line := range strings.Lines(string(data)) {
		if len(body) == 0 && strings.HasPrefix(line, "#") {
			continue // the file's own header
		}
		body = append(body, line)
	}
	if !slices.Contains(fencedBlocks(t, "yaml"), strings.Join(body, "")) {
		t.Error("README.md should show examples/production/kustomization.yaml (without its header comment) as it is")
	}
}

// TestReadmeMigrateJob decodes the README's migration Job strictly and checks
// that the bridge accepts its environment.
func TestReadmeMigrateJob(t *testing.T) {
	var jobs []batchv1.Job
	for _, block := range fencedBlocks(t, "yaml") {
		if !strings.Contains(block, "\nkind: Job\n") {
			continue
		}
		data, err := yaml.YAMLToJSONStrict([]byte(block))
		if err != nil {
			t.Fatalf("README Job: %v", err)
		}
		var job batchv1.Job
		if err := strictDecode(data, &job); err != nil {
			t.Fatalf("README Job does not decode strictly: %v", err)
		}
		jobs = append(jobs, job)
	}
	if len(jobs) != 1 {
		t.Fatalf("README.md has %d Jobs, want the migration Job", len(jobs))
	}
	job := jobs[0]
	if job.APIVersion != "batch/v1" || job.Labels[appLabel] != appName {
		t.Errorf("Job %s labels %v", job.APIVersion, job.Labels)
	}
	pod := job.Spec.Template.Spec
	if len(pod.Containers) != 1 || !slices.Equal(pod.Containers[0].Args, []string{"migrate"}) {
		t.Fatalf("Job containers %+v, want one with args [migrate]", pod.Containers)
	}
	if pod.RestartPolicy != "OnFailure" && pod.RestartPolicy != "Never" {
		t.Errorf("restartPolicy %q: a Job takes OnFailure or Never", pod.RestartPolicy)
	}
	c := pod.Containers[0]
	var env []string
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.Name == "BRIDGE_DATABASE_URL" && e.ValueFrom.SecretKeyRef != nil &&
			e.ValueFrom.SecretKeyRef.Name == databaseSecret && e.ValueFrom.SecretKeyRef.Key == "url":
			env = append(env, e.Name+"="+databaseURLStandIn)
		default:
			t.Errorf("env %s from %+v: not expected", e.Name, e.ValueFrom)
		}
	}
	cfg := loadConfig(t, env)
	if cfg.DatabaseURL() != databaseURLStandIn {
		t.Errorf("database %q, want the Secret's URL", cfg.DatabaseURL())
	}
	if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Error("the Job should run as non-root")
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("the Job should have a read-only root file system")
	}

	// The Job migrates the table the example overlay relays, in its
	// namespace, with its image: a relay started on a table no Job created
	// exits "outbox table missing".
	overlay := render(t, "examples/production")
	relayCfg := loadConfig(t, environ(t, &overlay))
	if cfg.Database.Table != relayCfg.Database.Table {
		t.Errorf("the Job migrates table %q, the overlay relays %q", cfg.Database.Table, relayCfg.Database.Table)
	}
	if job.Namespace != overlay.deployment.Namespace {
		t.Errorf("the Job runs in namespace %q, the overlay in %q", job.Namespace, overlay.deployment.Namespace)
	}
	if img := bridgeContainer(t, &overlay.deployment).Image; c.Image != img {
		t.Errorf("the Job runs image %q, the overlay %q", c.Image, img)
	}
}
