package deployments_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8sjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/outbox-bridge/bridge/internal/config"
)

const (
	appLabel       = "app.kubernetes.io/name"
	appName        = "outbox-bridge"
	databaseSecret = "outbox-bridge-database"
	natsSecret     = "outbox-bridge-nats"
	credsPath      = "/etc/bridge/nats/user.creds"
	containerName  = "bridge"
	metricsPort    = 8080

	// The values the Secret and the downward API give the container at run time,
	// stood in for when the container's environment is loaded by internal/config.
	databaseURLStandIn = "postgres://bridge:secret@db.example:5432/app?sslmode=require"
	podNameStandIn     = "outbox-bridge-6f9c8d7b5-x2k4q"
)

// serviceMonitor mirrors the fields of a Prometheus Operator ServiceMonitor
// (monitoring.coreos.com/v1) that the base uses. k8s.io/api has no type for it
// and the operator's Go module is not a dependency; strict decoding into this
// mirror refuses any field the manifest has that the mirror lacks, so a field
// added to servicemonitor.yaml must be added (and checked) here too. The JSON
// names are the operator's.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// natsStream mirrors the fields of a NACK Stream (jetstream.nats.io/v1beta2)
// that the base uses, for the same reason as serviceMonitor: no k8s.io/api type,
// NACK's module is not a dependency, and strict decoding into the mirror refuses
// fields it does not know. The JSON names are NACK's CRD's.
type natsStream struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Name            string   `json:"name"`
		Subjects        []string `json:"subjects"`
		Retention       string   `json:"retention"`
		Discard         string   `json:"discard"`
		Storage         string   `json:"storage"`
		Replicas        int      `json:"replicas"`
		DuplicateWindow string   `json:"duplicateWindow"`
		MaxAge          string   `json:"maxAge"`
	} `json:"spec"`
}

// rendered is the output of one kustomization, each resource decoded strictly.
type rendered struct {
	deployment     appsv1.Deployment
	configMap      corev1.ConfigMap
	service        corev1.Service
	pdb            policyv1.PodDisruptionBudget
	serviceMonitor serviceMonitor
	stream         natsStream
}

// strictDecode decodes the JSON data into v, refusing unknown fields, duplicate
// fields and fields whose case differs from the type's JSON name (which
// encoding/json would accept). It is the decoding the API server applies with
// fieldValidation=Strict.
func strictDecode(data []byte, v any) error {
	strict, err := k8sjson.UnmarshalStrict(data, v, k8sjson.DisallowUnknownFields, k8sjson.DisallowDuplicateFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// render runs kustomize over dir (relative to this package) on the real file
// system, as `kubectl apply -k` would, and decodes every resource strictly into
// its type. It fails the test on a kind it does not expect and on a kind that
// is missing or repeated; omit lists the kinds (apiVersion/kind) an overlay
// removed.
func render(t *testing.T, dir string, omit ...string) rendered {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var out rendered
	targets := map[string]any{
		"apps/v1/Deployment":                      &out.deployment,
		"v1/ConfigMap":                            &out.configMap,
		"v1/Service":                              &out.service,
		"policy/v1/PodDisruptionBudget":           &out.pdb,
		"monitoring.coreos.com/v1/ServiceMonitor": &out.serviceMonitor,
		"jetstream.nats.io/v1beta2/Stream":        &out.stream,
	}
	for _, key := range omit {
		delete(targets, key)
	}
	seen := make(map[string]int)
	for _, res := range resMap.Resources() {
		key := res.GetApiVersion() + "/" + res.GetKind()
		target, ok := targets[key]
		if !ok {
			t.Errorf("%s: unexpected resource %s %s", dir, key, res.GetName())
			continue
		}
		seen[key]++
		data, err := res.MarshalJSON()
		if err != nil {
			t.Fatalf("%s: %s %s as JSON: %v", dir, key, res.GetName(), err)
		}
		if err := strictDecode(data, target); err != nil {
			t.Errorf("%s: %s %s does not decode strictly: %v", dir, key, res.GetName(), err)
		}
	}
	for key := range targets {
		if seen[key] != 1 {
			t.Errorf("%s: %d resources of %s, want 1", dir, seen[key], key)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return out
}

func (r *rendered) objects() []metav1.Object {
	return []metav1.Object{&r.deployment, &r.configMap, &r.service, &r.pdb, &r.serviceMonitor, &r.stream}
}

// bridgeContainer returns the relay's container of the Deployment.
func bridgeContainer(t *testing.T, d *appsv1.Deployment) *corev1.Container {
	t.Helper()
	cs := d.Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].Name != containerName {
		t.Fatalf("Deployment containers = %d (first %q), want one named %q", len(cs), firstName(cs), containerName)
	}
	return &cs[0]
}

func int32String(p *int32) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(int(*p))
}

func firstName(cs []corev1.Container) string {
	if len(cs) == 0 {
		return ""
	}
	return cs[0].Name
}

// environ is the container's environment as the relay sees it, os.Environ()
// shaped: the ConfigMap's data (envFrom) first, then env, which overrides it,
// with stand-ins for the Secret and the pod name.
func environ(t *testing.T, r *rendered) []string {
	t.Helper()
	c := bridgeContainer(t, &r.deployment)
	var env []string
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef == nil || from.ConfigMapRef.Name != r.configMap.Name || from.Prefix != "" {
			t.Fatalf("envFrom %+v: want the ConfigMap %s without prefix", from, r.configMap.Name)
		}
		keys := make([]string, 0, len(r.configMap.Data))
		for k := range r.configMap.Data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			env = append(env, k+"="+r.configMap.Data[k])
		}
	}
	if len(c.EnvFrom) != 1 {
		t.Fatalf("envFrom has %d sources, want the ConfigMap only", len(c.EnvFrom))
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.Name == "BRIDGE_DATABASE_URL":
			ref := e.ValueFrom.SecretKeyRef
			if ref == nil || ref.Name != databaseSecret || ref.Key != "url" || (ref.Optional != nil && *ref.Optional) {
				t.Fatalf("BRIDGE_DATABASE_URL from %+v, want the required key url of Secret %s", e.ValueFrom, databaseSecret)
			}
			env = append(env, e.Name+"="+databaseURLStandIn)
		case e.Name == "BRIDGE_RELAY_OWNER":
			ref := e.ValueFrom.FieldRef
			if ref == nil || ref.FieldPath != "metadata.name" {
				t.Fatalf("BRIDGE_RELAY_OWNER from %+v, want fieldRef metadata.name", e.ValueFrom)
			}
			env = append(env, e.Name+"="+podNameStandIn)
		default:
			t.Fatalf("env %s from %+v: not expected", e.Name, e.ValueFrom)
		}
	}
	return env
}

// loadConfig loads the container's environment with the bridge's own
// configuration loader, as `bridge run` does at start.
func loadConfig(t *testing.T, env []string) *config.Config {
	t.Helper()
	if unknown := config.UnknownEnv(env); len(unknown) > 0 {
		t.Fatalf("variables that name no configuration key: %v", unknown)
	}
	cfg, err := config.Load(nil, env)
	if err != nil {
		t.Fatalf("the container's environment is refused by the bridge: %v\n%s", err, strings.Join(env, "\n"))
	}
	return cfg
}

func selects(t *testing.T, what string, sel *metav1.LabelSelector, podLabels map[string]string) {
	t.Helper()
	if sel == nil {
		t.Errorf("%s: no selector", what)
		return
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Errorf("%s: selector: %v", what, err)
		return
	}
	if s.Empty() || !s.Matches(labels.Set(podLabels)) {
		t.Errorf("%s: selector %q does not select the pods (labels %v)", what, s, podLabels)
	}
}

func TestKustomizeBase(t *testing.T) {
	r := render(t, "kubernetes")
	d := &r.deployment
	pod := &d.Spec.Template.Spec
	podLabels := d.Spec.Template.Labels
	c := bridgeContainer(t, d)
	cfg := loadConfig(t, environ(t, &r))

	t.Run("labels and namespace", func(t *testing.T) {
		for _, o := range r.objects() {
			if o.GetNamespace() != "" {
				t.Errorf("%s has namespace %q; the base leaves it to the overlay", o.GetName(), o.GetNamespace())
			}
			if o.GetLabels()[appLabel] != appName {
				t.Errorf("%s: label %s = %q, want %q", o.GetName(), appLabel, o.GetLabels()[appLabel], appName)
			}
		}
		if podLabels[appLabel] != appName {
			t.Errorf("pod template label %s = %q", appLabel, podLabels[appLabel])
		}
	})

	t.Run("deployment", func(t *testing.T) {
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
			t.Errorf("replicas = %s, want 2", int32String(d.Spec.Replicas))
		}
		selects(t, "Deployment", d.Spec.Selector, podLabels)
		if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
			t.Errorf("rollingUpdate = %+v, want maxUnavailable 0", ru)
		}
		if !slices.Equal(c.Args, []string{"run"}) || len(c.Command) != 0 {
			t.Errorf("command %q args %q, want the image's entrypoint with args [run]", c.Command, c.Args)
		}
		if c.Image != "outbox-bridge:latest" {
			t.Errorf("image = %q, want outbox-bridge:latest (overlays set newName/newTag)", c.Image)
		}
		if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
			t.Error("enableServiceLinks should be false: service links can inject BRIDGE_* variables")
		}
		if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
			t.Error("automountServiceAccountToken should be false")
		}
	})

	t.Run("configuration", func(t *testing.T) {
		want := map[string]string{
			"BRIDGE_NATS_URL":               "nats://nats.nats.svc:4222",
			"BRIDGE_DATABASE_TABLE":         "outbox",
			"BRIDGE_HTTP_LISTEN":            ":8080",
			"BRIDGE_LOG_FORMAT":             "json",
			"BRIDGE_SHUTDOWN_TIMEOUT":       "25s",
			"BRIDGE_RELAY_INFLIGHT_TIMEOUT": "30s",
		}
		for k, v := range want {
			if got, ok := r.configMap.Data[k]; !ok || got != v {
				t.Errorf("ConfigMap %s = %q, want %q", k, got, v)
			}
		}
		for k := range r.configMap.Data {
			if _, ok := want[k]; !ok {
				t.Errorf("ConfigMap has %s, which this test does not check", k)
			}
			if strings.Contains(k, "PASSWORD") || strings.Contains(k, "TOKEN") || k == "BRIDGE_DATABASE_URL" {
				t.Errorf("ConfigMap holds %s, a secret", k)
			}
		}
		if !strings.HasPrefix(r.configMap.Name, appName+"-") {
			t.Errorf("ConfigMap name %q: want the generator's hashed name (a change rolls the pods)", r.configMap.Name)
		}
		if cfg.DatabaseURL() != databaseURLStandIn || cfg.EmbeddedDatabase() || cfg.EmbeddedNATS() {
			t.Errorf("database %q, embedded NATS %v: want the Secret's URL and an external NATS", cfg.DatabaseURL(), cfg.EmbeddedNATS())
		}
		if cfg.Relay.Owner != podNameStandIn {
			t.Errorf("relay.owner = %q, want the pod name", cfg.Relay.Owner)
		}
		if cfg.Log.Format != config.LogFormatJSON {
			t.Errorf("log.format = %q, want json", cfg.Log.Format)
		}
		if len(cfg.Streams) != 0 {
			t.Errorf("streams = %v: the NACK Stream owns the stream's settings, the relay should ensure none", cfg.Streams)
		}
	})

	t.Run("nats credentials", func(t *testing.T) {
		if cfg.NATS.CredsFile != credsPath {
			t.Fatalf("nats.creds_file = %q, want %q", cfg.NATS.CredsFile, credsPath)
		}
		dir, file := path.Split(cfg.NATS.CredsFile)
		var mount *corev1.VolumeMount
		for i := range c.VolumeMounts {
			if path.Clean(c.VolumeMounts[i].MountPath) == path.Clean(dir) {
				mount = &c.VolumeMounts[i]
			}
		}
		if mount == nil || !mount.ReadOnly || mount.SubPath != "" {
			t.Fatalf("no read-only volume mounted at %s (mounts %+v)", dir, c.VolumeMounts)
		}
		var vol *corev1.Volume
		for i := range pod.Volumes {
			if pod.Volumes[i].Name == mount.Name {
				vol = &pod.Volumes[i]
			}
		}
		if vol == nil || vol.Secret == nil || vol.Secret.SecretName != natsSecret {
			t.Fatalf("volume %q = %+v, want Secret %s", mount.Name, vol, natsSecret)
		}
		found := false
		for _, item := range vol.Secret.Items {
			found = found || (item.Key == "user.creds" && item.Path == file)
		}
		if !found {
			t.Errorf("Secret volume items %+v: want key user.creds at %s", vol.Secret.Items, file)
		}
		// Secret files are root-owned; the non-root user reads them through fsGroup.
		mode := vol.Secret.DefaultMode
		if mode == nil || *mode&0o040 == 0 || *mode&0o007 != 0 {
			t.Errorf("defaultMode = %v, want group-readable and nothing for others", mode)
		}
		if pod.SecurityContext.FSGroup == nil || *pod.SecurityContext.FSGroup != 65532 {
			t.Errorf("fsGroup = %v, want 65532 so the non-root user can read the credentials", pod.SecurityContext.FSGroup)
		}
	})

	t.Run("probes and ports", func(t *testing.T) {
		_, portText, err := net.SplitHostPort(cfg.HTTP.Listen)
		if err != nil {
			t.Fatalf("http.listen %q: %v", cfg.HTTP.Listen, err)
		}
		if port, _ := strconv.Atoi(portText); port != metricsPort {
			t.Fatalf("http.listen %q, want port %d", cfg.HTTP.Listen, metricsPort)
		}
		if len(c.Ports) != 1 || c.Ports[0].ContainerPort != metricsPort || c.Ports[0].Name != "metrics" {
			t.Errorf("container ports %+v, want %d named metrics", c.Ports, metricsPort)
		}
		for _, p := range []struct {
			name  string
			probe *corev1.Probe
			path  string
		}{
			{"startup", c.StartupProbe, "/healthz"},
			{"liveness", c.LivenessProbe, "/healthz"},
			{"readiness", c.ReadinessProbe, "/readyz"},
		} {
			if p.probe == nil || p.probe.HTTPGet == nil {
				t.Errorf("%s probe: want httpGet %s", p.name, p.path)
				continue
			}
			g := p.probe.HTTPGet
			if g.Path != p.path || g.Port != intstr.FromInt32(metricsPort) {
				t.Errorf("%s probe httpGet %s port %s, want %s port %d", p.name, g.Path, g.Port.String(), p.path, metricsPort)
			}
		}
		if sp := c.StartupProbe; sp != nil && time.Duration(sp.PeriodSeconds*sp.FailureThreshold)*time.Second < 30*time.Second {
			t.Errorf("startup probe allows %ds, want at least 30s to connect", sp.PeriodSeconds*sp.FailureThreshold)
		}
	})

	t.Run("security", func(t *testing.T) {
		psc := pod.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
			t.Error("pod runAsNonRoot should be true")
		}
		sc := c.SecurityContext
		if sc == nil {
			t.Fatal("container has no securityContext")
		}
		if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Error("runAsNonRoot should be true")
		}
		if sc.RunAsUser == nil || *sc.RunAsUser != 65532 {
			t.Errorf("runAsUser = %v, want 65532 (distroless nonroot)", sc.RunAsUser)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Error("readOnlyRootFilesystem should be true")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Error("allowPrivilegeEscalation should be false")
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
			t.Errorf("capabilities = %+v, want drop [ALL] and nothing added", sc.Capabilities)
		}
		if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("seccompProfile = %+v, want RuntimeDefault", sc.SeccompProfile)
		}
		tmp := false
		for _, m := range c.VolumeMounts {
			for _, v := range pod.Volumes {
				tmp = tmp || (m.MountPath == "/tmp" && m.Name == v.Name && v.EmptyDir != nil)
			}
		}
		if !tmp {
			t.Error("want an emptyDir at /tmp beside the read-only root")
		}
	})

	t.Run("shutdown", func(t *testing.T) {
		grace := pod.TerminationGracePeriodSeconds
		if grace == nil {
			t.Fatal("terminationGracePeriodSeconds not set (the default 30s is too close to shutdown_timeout)")
		}
		if *grace <= 25 {
			t.Errorf("terminationGracePeriodSeconds = %d, want more than 25", *grace)
		}
		// A few seconds beyond the drain for the process to exit after it.
		if g := time.Duration(*grace) * time.Second; g < cfg.ShutdownTimeout+5*time.Second {
			t.Errorf("terminationGracePeriodSeconds %s, want at least shutdown_timeout %s + 5s", g, cfg.ShutdownTimeout)
		}
	})

	t.Run("resources", func(t *testing.T) {
		res := c.Resources
		for _, q := range []struct {
			what string
			list corev1.ResourceList
			name corev1.ResourceName
			want string
		}{
			{"requests", res.Requests, corev1.ResourceCPU, "100m"},
			{"requests", res.Requests, corev1.ResourceMemory, "64Mi"},
			{"limits", res.Limits, corev1.ResourceMemory, "256Mi"},
		} {
			got, ok := q.list[q.name]
			if !ok || got.Cmp(resource.MustParse(q.want)) != 0 {
				t.Errorf("%s %s = %s, want %s", q.what, q.name, got.String(), q.want)
			}
		}
		if _, ok := res.Limits[corev1.ResourceCPU]; ok {
			t.Error("no CPU limit: throttling would stretch PubAck waits")
		}
	})

	t.Run("pod disruption budget", func(t *testing.T) {
		minAvailable := r.pdb.Spec.MinAvailable
		if minAvailable == nil || *minAvailable != intstr.FromInt32(1) {
			t.Errorf("minAvailable = %v, want 1", minAvailable)
		}
		if r.pdb.Spec.MaxUnavailable != nil {
			t.Errorf("maxUnavailable = %v, want only minAvailable", r.pdb.Spec.MaxUnavailable)
		}
		selects(t, "PodDisruptionBudget", r.pdb.Spec.Selector, podLabels)
	})

	t.Run("service and monitor", func(t *testing.T) {
		s := r.service.Spec
		if s.Type != corev1.ServiceTypeClusterIP {
			t.Errorf("Service type = %q, want ClusterIP", s.Type)
		}
		selects(t, "Service", &metav1.LabelSelector{MatchLabels: s.Selector}, podLabels)
		if len(s.Ports) != 1 || s.Ports[0].Name != "metrics" || s.Ports[0].Port != metricsPort ||
			s.Ports[0].TargetPort != intstr.FromString(c.Ports[0].Name) {
			t.Errorf("Service ports %+v, want metrics %d to the container's port %q", s.Ports, metricsPort, c.Ports[0].Name)
		}
		sm := r.serviceMonitor.Spec
		selects(t, "ServiceMonitor", &sm.Selector, r.service.Labels)
		if len(sm.Endpoints) != 1 || sm.Endpoints[0].Port != "metrics" || sm.Endpoints[0].Path != "/metrics" {
			t.Errorf("ServiceMonitor endpoints %+v, want port metrics path /metrics", sm.Endpoints)
		}
		for _, e := range sm.Endpoints {
			if _, err := time.ParseDuration(e.Interval); e.Interval != "" && err != nil {
				t.Errorf("interval %q: %v", e.Interval, err)
			}
		}
	})

	t.Run("stream", func(t *testing.T) {
		s := r.stream.Spec
		if s.Name != "EVENTS" || !slices.Equal(s.Subjects, []string{"events.>"}) {
			t.Errorf("stream %s on %v, want EVENTS on events.>", s.Name, s.Subjects)
		}
		checkStream(t, &r.stream, cfg)
		if s.Replicas != 3 {
			t.Errorf("replicas = %d, want 3", s.Replicas)
		}
	})
}

// checkStream asserts what the relay needs of its stream, whatever its name.
func checkStream(t *testing.T, st *natsStream, cfg *config.Config) {
	t.Helper()
	s := st.Spec
	if _, err := config.ParseStreamFlag(s.Name + ":" + strings.Join(s.Subjects, ",")); err != nil {
		t.Errorf("stream name or subjects refused by the bridge's own rules: %v", err)
	}
	// Only limits retention keeps message ids for the whole duplicate window;
	// workqueue and interest drop them with the acknowledged message
	// (nats-server#3272).
	if s.Retention != "limits" {
		t.Errorf("retention = %q, want limits", s.Retention)
	}
	if s.Storage != "file" {
		t.Errorf("storage = %q, want file", s.Storage)
	}
	if s.Replicas < 1 || s.Replicas > 5 || s.Replicas%2 == 0 {
		t.Errorf("replicas = %d, want 1, 3 or 5", s.Replicas)
	}
	window, err := time.ParseDuration(s.DuplicateWindow)
	if err != nil {
		t.Fatalf("duplicateWindow %q: %v", s.DuplicateWindow, err)
	}
	if window < 35*time.Second {
		t.Errorf("duplicateWindow = %s, want at least 35s", window)
	}
	// The longest a republish can follow its first publish.
	if need := cfg.Relay.InflightTimeout + cfg.Relay.PublishTimeout; window <= need {
		t.Errorf("duplicateWindow %s, want longer than relay.inflight_timeout %s + relay.publish_timeout %s",
			window, cfg.Relay.InflightTimeout, cfg.Relay.PublishTimeout)
	}
	maxAge, err := time.ParseDuration(s.MaxAge)
	if err != nil || maxAge < window {
		t.Errorf("maxAge %q (%v): want a duration of at least the duplicate window", s.MaxAge, err)
	}
	if s.Discard != "" && s.Discard != "old" && s.Discard != "new" {
		t.Errorf("discard = %q, want old or new", s.Discard)
	}
}

// TestExampleOverlay renders the README's overlay over the base, as a service
// team would apply it.
func TestExampleOverlay(t *testing.T) {
	base := render(t, "kubernetes")
	r := render(t, "examples/production")
	for _, o := range r.objects() {
		if o.GetNamespace() != "orders" {
			t.Errorf("%s: namespace %q, want orders", o.GetName(), o.GetNamespace())
		}
	}
	c := bridgeContainer(t, &r.deployment)
	if c.Image != "registry.example.com/outbox-bridge:v1.0.0" {
		t.Errorf("image = %q", c.Image)
	}
	if r.deployment.Spec.Replicas == nil || *r.deployment.Spec.Replicas != 3 {
		t.Errorf("replicas = %s, want 3", int32String(r.deployment.Spec.Replicas))
	}
	if r.configMap.Name == base.configMap.Name {
		t.Errorf("ConfigMap name %q unchanged by the merge: pods would not roll", r.configMap.Name)
	}
	cfg := loadConfig(t, environ(t, &r))
	if cfg.Database.Table != "orders.outbox" || cfg.Dedup.Namespace != "orders" || cfg.Relay.MaxInFlight != 4000 {
		t.Errorf("table %q, namespace %q, max_in_flight %d: the overlay's settings are not in effect",
			cfg.Database.Table, cfg.Dedup.Namespace, cfg.Relay.MaxInFlight)
	}
	if cfg.Log.Format != config.LogFormatJSON || cfg.ShutdownTimeout != 25*time.Second {
		t.Errorf("log.format %q, shutdown_timeout %s: the base's settings should stay", cfg.Log.Format, cfg.ShutdownTimeout)
	}
	if got := c.Resources.Limits[corev1.ResourceMemory]; got.Cmp(resource.MustParse("512Mi")) != 0 {
		t.Errorf("memory limit = %s, want 512Mi", got.String())
	}
	if r.stream.Name != "orders" || r.stream.Spec.Name != "ORDERS" || !slices.Equal(r.stream.Spec.Subjects, []string{"orders.>"}) {
		t.Errorf("stream %s/%s on %v, want orders/ORDERS on orders.>", r.stream.Name, r.stream.Spec.Name, r.stream.Spec.Subjects)
	}
	checkStream(t, &r.stream, cfg)
	// The base's selectors are unchanged (they are immutable on a live Deployment).
	if fmt.Sprint(r.deployment.Spec.Selector) != fmt.Sprint(base.deployment.Spec.Selector) {
		t.Errorf("selector %v, want the base's %v", r.deployment.Spec.Selector, base.deployment.Spec.Selector)
	}
}

// TestStrictDecodeRefuses proves that the decoding above can fail: a Deployment
// with a field k8s.io/api does not have, or a known field spelt in another case
// (which encoding/json alone would take), or given twice, is refused.
func TestStrictDecodeRefuses(t *testing.T) {
	const good = `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x"},
		"spec":{"replicas":2,"selector":{"matchLabels":{"a":"b"}},"template":{"metadata":{"labels":{"a":"b"}},
		"spec":{"containers":[{"name":"c","image":"i","livenessProbe":{"httpGet":{"path":"/healthz","port":8080}}}]}}}}`
	var d appsv1.Deployment
	if err := strictDecode([]byte(good), &d); err != nil {
		t.Fatalf("the well-formed document is refused: %v", err)
	}
	if *d.Spec.Replicas != 2 || d.Spec.Template.Spec.Containers[0].LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Fatalf("decoded %+v", d.Spec)
	}
	for _, tc := range []struct{ name, from, to, field string }{
		{"unknown top-level field", `"kind":"Deployment",`, `"kind":"Deployment","replicas":2,`, "replicas"},
		{"unknown spec field", `"replicas":2,`, `"replicas":2,"replica":2,`, "replica"},
		{"unknown nested field", `"path":"/healthz"`, `"paht":"/healthz"`, "paht"},
		{"field in another case", `"replicas":2,`, `"Replicas":2,`, "Replicas"},
		{"duplicate field", `"replicas":2,`, `"replicas":2,"replicas":3,`, "replicas"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(good, tc.from, tc.to, 1)
			if doc == good {
				t.Fatalf("%q not found in the document", tc.from)
			}
			var d appsv1.Deployment
			err := strictDecode([]byte(doc), &d)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("strictDecode = %v, want an error naming %q", err, tc.field)
			}
		})
	}
	t.Run("unknown field in a mirror", func(t *testing.T) {
		var s natsStream
		err := strictDecode([]byte(`{"apiVersion":"jetstream.nats.io/v1beta2","kind":"Stream","metadata":{"name":"e"},
			"spec":{"name":"E","duplicate_window":"5m"}}`), &s)
		if err == nil || !strings.Contains(err.Error(), "duplicate_window") {
			t.Fatalf("strictDecode = %v, want an error naming duplicate_window", err)
		}
	})
}

// withoutOperators is the README's overlay for a cluster without the Prometheus
// Operator and NACK CRDs; base is replaced by the base's path.
const withoutOperators = `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - base
patches:
  - patch: |-
      $patch: delete
      apiVersion: monitoring.coreos.com/v1
      kind: ServiceMonitor
      metadata:
        name: outbox-bridge
  - patch: |-
      $patch: delete
      apiVersion: jetstream.nats.io/v1beta2
      kind: Stream
      metadata:
        name: events
`

// TestOverlayWithoutOperators renders the README's overlay that drops the two
// custom resources, from a directory outside the tree as a user's would be.
func TestOverlayWithoutOperators(t *testing.T) {
	base, err := filepath.Abs("kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, base) // kustomize takes no absolute base
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Replace(withoutOperators, "  - base\n", "  - "+filepath.ToSlash(rel)+"\n", 1)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	r := render(t, dir, "monitoring.coreos.com/v1/ServiceMonitor", "jetstream.nats.io/v1beta2/Stream")
	if int32String(r.deployment.Spec.Replicas) != "2" || r.service.Spec.Ports[0].Name != "metrics" {
		t.Errorf("the rest of the base should stay: replicas %s, service ports %+v", int32String(r.deployment.Spec.Replicas), r.service.Spec.Ports)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(withoutOperators, "  - base\n", "  - ../../kubernetes\n", 1); !strings.Contains(string(readme), want) {
		t.Errorf("README.md should show this overlay as tested:\n%s", want)
	}
}
