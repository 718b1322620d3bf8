package deployments_test

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/outbox-bridge/bridge/internal/config"
)

// The compose file is decoded into a mirror of the part of the Compose
// Specification (compose-spec.io, the schema `docker compose` validates
// against) that compose.yaml uses, with unknown keys refused: every key of the
// file must be a field below, and every field below is named as in the spec.
// A key added to compose.yaml needs its field here.
type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]*composeVolume `yaml:"volumes"`
}

type composeService struct {
	Image           string                       `yaml:"image"`
	Build           *composeBuild                `yaml:"build"`
	Command         []string                     `yaml:"command"`
	Environment     map[string]string            `yaml:"environment"`
	Ports           []string                     `yaml:"ports"`
	Volumes         []string                     `yaml:"volumes"`
	Healthcheck     *composeHealthcheck          `yaml:"healthcheck"`
	DependsOn       map[string]composeDependency `yaml:"depends_on"`
	Restart         string                       `yaml:"restart"`
	StopGracePeriod string                       `yaml:"stop_grace_period"`
}

type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

type composeHealthcheck struct {
	Test        []string `yaml:"test"`
	Interval    string   `yaml:"interval"`
	Timeout     string   `yaml:"timeout"`
	Retries     int      `yaml:"retries"`
	StartPeriod string   `yaml:"start_period"`
}

type composeDependency struct {
	Condition string `yaml:"condition"`
}

type composeVolume struct {
	Driver string `yaml:"driver"`
}

const composeDBURL = "postgres://bridge:bridge@postgres:5432/bridge?sslmode=disable"

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	data, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f composeFile
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return f
}

func TestComposeFile(t *testing.T) {
	f := loadCompose(t)
	names := make([]string, 0, len(f.Services))
	for name := range f.Services {
		names = append(names, name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"bridge", "migrate", "nats", "postgres"}) {
		t.Fatalf("services %v, want bridge, migrate, nats, postgres", names)
	}

	// Rules of the spec that a mirror does not carry.
	for name, s := range f.Services {
		if s.Image == "" && s.Build == nil {
			t.Errorf("%s: neither image nor build", name)
		}
		for dep, d := range s.DependsOn {
			if _, ok := f.Services[dep]; !ok {
				t.Errorf("%s depends on %s, which is not a service", name, dep)
			}
			if !slices.Contains([]string{"service_started", "service_healthy", "service_completed_successfully"}, d.Condition) {
				t.Errorf("%s depends on %s with condition %q", name, dep, d.Condition)
			}
			if d.Condition == "service_healthy" && f.Services[dep].Healthcheck == nil {
				t.Errorf("%s waits for %s to be healthy, which has no healthcheck", name, dep)
			}
		}
		for _, v := range s.Volumes {
			source, _, ok := strings.Cut(v, ":")
			if _, named := f.Volumes[source]; !ok || (!named && !strings.HasPrefix(source, ".") && !strings.HasPrefix(source, "/")) {
				t.Errorf("%s: volume %q is neither a declared volume nor a path", name, v)
			}
		}
		for _, p := range s.Ports {
			pp, err := parsePort(p)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			// A developer's machine often runs PostgreSQL or NATS itself.
			if pp.hostDefault == pp.container || pp.hostDefault < 49152 {
				t.Errorf("%s: port %q publishes %d by default; choose one from 49152 up, away from the service's usual port", name, p, pp.hostDefault)
			}
			if !strings.Contains(readme(t), pp.variable) {
				t.Errorf("%s: port variable %s is not in deployments/README.md", name, pp.variable)
			}
		}
		if h := s.Healthcheck; h != nil {
			if len(h.Test) < 2 || (h.Test[0] != "CMD" && h.Test[0] != "CMD-SHELL") {
				t.Errorf("%s: healthcheck test %q, want [CMD …] or [CMD-SHELL …]", name, h.Test)
			}
			for _, d := range []string{h.Interval, h.Timeout, h.StartPeriod} {
				if _, err := time.ParseDuration(d); d != "" && err != nil {
					t.Errorf("%s: healthcheck duration %q: %v", name, d, err)
				}
			}
		}
		if _, err := time.ParseDuration(s.StopGracePeriod); s.StopGracePeriod != "" && err != nil {
			t.Errorf("%s: stop_grace_period %q: %v", name, s.StopGracePeriod, err)
		}
		if r := s.Restart; r != "" && !slices.Contains([]string{"no", "always", "on-failure", "unless-stopped"}, r) && !strings.HasPrefix(r, "on-failure:") {
			t.Errorf("%s: restart %q", name, r)
		}
	}

	pg := f.Services["postgres"]
	if pg.Image != "postgres:16" || pg.Healthcheck == nil || !strings.Contains(strings.Join(pg.Healthcheck.Test, " "), "pg_isready") {
		t.Errorf("postgres: image %q healthcheck %+v, want postgres:16 checked with pg_isready", pg.Image, pg.Healthcheck)
	}

	nats := f.Services["nats"]
	if !strings.HasPrefix(nats.Image, "nats:2.1") {
		t.Errorf("nats image %q, want nats:2.11 or 2.12", nats.Image)
	}
	if i := slices.Index(nats.Command, "-sd"); !slices.Contains(nats.Command, "-js") || i < 0 || i+1 >= len(nats.Command) || nats.Command[i+1] != "/data" {
		t.Errorf("nats command %q, want -js -sd /data", nats.Command)
	}

	migrate, bridge := f.Services["migrate"], f.Services["bridge"]
	for name, s := range map[string]composeService{"migrate": migrate, "bridge": bridge} {
		if s.Build == nil || s.Build.Context != ".." || s.Build.Dockerfile != "deployments/Dockerfile" {
			t.Errorf("%s: build %+v, want context .. and dockerfile deployments/Dockerfile", name, s.Build)
			continue
		}
		// The Dockerfile path is relative to the context, the context to this file.
		if _, err := os.Stat(filepath.Join(s.Build.Context, s.Build.Dockerfile)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if _, err := os.Stat(filepath.Join(s.Build.Context, "go.mod")); err != nil {
			t.Errorf("%s: the build context is not the module root: %v", name, err)
		}
	}
	if migrate.Image == "" || migrate.Image != bridge.Image || *migrate.Build != *bridge.Build {
		t.Errorf("migrate and bridge should run the same image: %q %+v, %q %+v", migrate.Image, migrate.Build, bridge.Image, bridge.Build)
	}
	if !slices.Equal(migrate.Command, []string{"migrate"}) {
		t.Errorf("migrate command %q", migrate.Command)
	}
	if migrate.DependsOn["postgres"].Condition != "service_healthy" {
		t.Errorf("migrate depends_on %+v, want postgres healthy", migrate.DependsOn)
	}
	if bridge.DependsOn["migrate"].Condition != "service_completed_successfully" {
		t.Errorf("bridge depends_on %+v, want migrate completed successfully", bridge.DependsOn)
	}
	if _, ok := bridge.DependsOn["nats"]; !ok {
		t.Errorf("bridge depends_on %+v, want nats too", bridge.DependsOn)
	}

	// The commands and environments as the bridge reads them.
	if len(bridge.Command) != 3 || bridge.Command[0] != "run" || bridge.Command[1] != "--ensure-stream" {
		t.Fatalf("bridge command %q, want run --ensure-stream EVENTS:events.>", bridge.Command)
	}
	stream, err := config.ParseStreamFlag(bridge.Command[2])
	if err != nil || stream.Name != "EVENTS" || !slices.Equal(stream.Subjects, []string{"events.>"}) {
		t.Errorf("--ensure-stream %q = %+v, %v; want EVENTS on events.>", bridge.Command[2], stream, err)
	}
	for name, s := range map[string]composeService{"migrate": migrate, "bridge": bridge} {
		var env []string
		for k, v := range s.Environment {
			env = append(env, k+"="+v)
		}
		slices.Sort(env)
		if unknown := config.UnknownEnv(env); len(unknown) > 0 {
			t.Errorf("%s: variables that name no configuration key: %v", name, unknown)
		}
		cfg, err := config.Load(nil, env)
		if err != nil {
			t.Errorf("%s: environment refused by the bridge: %v", name, err)
			continue
		}
		if cfg.DatabaseURL() != composeDBURL {
			t.Errorf("%s: database %q, want %q", name, cfg.DatabaseURL(), composeDBURL)
		}
		u, err := url.Parse(cfg.DatabaseURL())
		if err == nil {
			if _, ok := f.Services[u.Hostname()]; !ok {
				t.Errorf("%s: database host %q is not a service", name, u.Hostname())
			}
		}
		if name == "bridge" {
			u, err := url.Parse(cfg.NATS.URL)
			if err != nil || u.Hostname() != "nats" || u.Port() != "4222" {
				t.Errorf("bridge: nats.url %q, want the nats service on 4222", cfg.NATS.URL)
			}
			_, port, _ := net.SplitHostPort(cfg.HTTP.Listen)
			published := false
			for _, p := range bridge.Ports {
				pp, err := parsePort(p)
				published = published || (err == nil && strconv.Itoa(pp.container) == port)
			}
			if !published {
				t.Errorf("bridge: ports %q, want http.listen's %s published", bridge.Ports, port)
			}
		}
	}
	if d, err := time.ParseDuration(bridge.StopGracePeriod); err != nil || d <= config.ShutdownTimeoutDefault {
		t.Errorf("bridge stop_grace_period %q, want more than shutdown_timeout %s", bridge.StopGracePeriod, config.ShutdownTimeoutDefault)
	}
}

// publishedPort is a ports entry of compose.yaml:
// "127.0.0.1:${VARIABLE:-DEFAULT}:CONTAINER".
type publishedPort struct {
	variable    string
	hostDefault int
	container   int
}

var portPattern = regexp.MustCompile(`^127\.0\.0\.1:\$\{(OUTBOX_BRIDGE_[A-Z_]+_PORT):-(\d+)\}:(\d+)$`)

// parsePort reads a ports entry: on the loopback interface only (the
// passwords are well known), the host port from a variable with a default.
func parsePort(p string) (publishedPort, error) {
	m := portPattern.FindStringSubmatch(p)
	if m == nil {
		return publishedPort{}, fmt.Errorf("port %q, want 127.0.0.1:${OUTBOX_BRIDGE_…_PORT:-DEFAULT}:CONTAINER", p)
	}
	def, _ := strconv.Atoi(m[2])
	container, _ := strconv.Atoi(m[3])
	return publishedPort{variable: m[1], hostDefault: def, container: container}, nil
}

func readme(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestComposeStrict proves that the mirror refuses a key the spec does not have.
func TestComposeStrict(t *testing.T) {
	for _, doc := range []string{
		"services:\n  x:\n    image: a\n    depends:\n      y: {}\n",
		"services:\n  x:\n    image: a\n    healthcheck:\n      test: [CMD, x]\n      intervall: 2s\n",
		"service:\n  x:\n    image: a\n",
	} {
		dec := yaml.NewDecoder(strings.NewReader(doc))
		dec.KnownFields(true)
		var f composeFile
		if err := dec.Decode(&f); err == nil || !strings.Contains(err.Error(), "not found in type") {
			t.Errorf("decoding %q = %v, want an unknown-field error", doc, err)
		}
	}
}
