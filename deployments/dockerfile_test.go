package deployments_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, …
	args string
}

func readDockerfile(t *testing.T, name string) []instruction {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(cont)
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.Join(strings.Fields(args), " ")})
		cur.Reset()
	}
	return out
}

// TestDockerfile checks the image's recipe where it meets the rest of the
// module: the Go version of go.mod, the modules its replace directives name,
// the main package and the build information variables, the non-root user
// of the manifests and the HTTP port. (No Docker engine runs the build here;
// the go build line itself is the README's.)
func TestDockerfile(t *testing.T) {
	ins := readDockerfile(t, "Dockerfile")
	var froms []string
	var final []instruction // the instructions of the last stage
	args := map[string]string{}
	for _, in := range ins {
		switch in.cmd {
		case "FROM":
			froms = append(froms, in.args)
			final = nil
		case "ARG":
			if k, v, ok := strings.Cut(in.args, "="); ok {
				args[k] = strings.Trim(v, `"`)
			}
		}
		final = append(final, in)
	}
	if len(froms) != 2 {
		t.Fatalf("stages %q, want build and runtime", froms)
	}

	data, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	mod, err := modfile.Parse("go.mod", data, nil)
	if err != nil || mod.Go == nil {
		t.Fatalf("go.mod: %v", err)
	}
	goMinor := strings.Join(strings.SplitN(mod.Go.Version, ".", 3)[:2], ".")
	if args["GO_VERSION"] != goMinor {
		t.Errorf("ARG GO_VERSION=%q, want go.mod's %s", args["GO_VERSION"], goMinor)
	}
	if !strings.Contains(froms[0], "golang:${GO_VERSION}") || !strings.HasSuffix(froms[0], " AS build") {
		t.Errorf("build stage FROM %q, want golang:${GO_VERSION}… AS build", froms[0])
	}

	// go mod download resolves every replace directive of go.mod: the
	// module it names must be in the context before it runs.
	var copied []string
	for _, in := range ins {
		if in.cmd == "COPY" {
			copied = append(copied, in.args)
		}
		if in.cmd == "RUN" && strings.Contains(in.args, "go mod download") {
			break
		}
	}
	for _, r := range mod.Replace {
		if !modfile.IsDirectoryPath(r.New.Path) {
			continue
		}
		dir := filepath.ToSlash(filepath.Clean(r.New.Path))
		want := dir + "/go.mod " + dir + "/go.sum ./" + dir + "/"
		if !slices.Contains(copied, want) {
			t.Errorf("go.mod replaces %s with %s, but the Dockerfile does not COPY %s before go mod download (COPYs: %q)", r.Old.Path, r.New.Path, want, copied)
		}
	}

	var build string
	for _, in := range ins {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			build = in.args
		}
	}
	const pkg = "github.com/outbox-bridge/bridge/internal/buildinfo"
	for _, want := range []string{"CGO_ENABLED=0", "go build -trimpath -ldflags \"-s -w -X " + pkg + ".version=${VERSION} -X " + pkg + ".commit=${COMMIT} -X " + pkg + ".date=${COMMIT_TIME}\" -o /bridge ./cmd/bridge"} {
		if !strings.Contains(build, want) {
			t.Errorf("build step %q lacks %q", build, want)
		}
	}
	for _, v := range []string{"version", "commit", "date"} {
		if !hasStringVar(t, "../internal/buildinfo", v) {
			t.Errorf("internal/buildinfo has no package-level string variable %s for -X", v)
		}
	}
	checkRuntimeStage(t, froms[1], final, "--from=build /bridge /bridge")
}

// TestReleaseDockerfile checks the image GoReleaser builds from its own
// binaries: the runtime stage of the Dockerfile, with the binary of the
// target platform from the context.
func TestReleaseDockerfile(t *testing.T) {
	ins := readDockerfile(t, "Dockerfile.release")
	if ins[0].cmd != "FROM" {
		t.Fatalf("first instruction %v, want FROM", ins[0])
	}
	checkRuntimeStage(t, ins[0].args, ins, "${TARGETPLATFORM}/bridge /bridge")
}

// checkRuntimeStage checks the final stage: distroless static, the binary
// copied from copyArgs, the non-root user of the manifests, port 8080,
// bridge run by default.
func checkRuntimeStage(t *testing.T, from string, final []instruction, copyArgs string) {
	t.Helper()
	if from != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("runtime stage FROM %q", from)
	}
	want := map[string]string{
		"COPY":       copyArgs,
		"USER":       "65532:65532",
		"EXPOSE":     "8080",
		"ENTRYPOINT": `["/bridge"]`,
		"CMD":        `["run"]`,
	}
	for _, in := range final {
		if w, ok := want[in.cmd]; ok {
			if in.args != w {
				t.Errorf("runtime %s %s, want %s", in.cmd, in.args, w)
			}
			delete(want, in.cmd)
		}
	}
	for cmd, w := range want {
		t.Errorf("runtime stage has no %s %s", cmd, w)
	}
}

// hasStringVar reports whether the package in dir declares a package-level
// variable name of type string (or untyped with a string value), as the
// linker's -X needs.
func hasStringVar(t *testing.T, dir, name string) bool {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if n.Name != name {
						continue
					}
					if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "string" {
						return true
					}
					if vs.Type == nil && i < len(vs.Values) {
						lit, ok := vs.Values[i].(*ast.BasicLit)
						return ok && lit.Kind == token.STRING
					}
				}
			}
		}
	}
	return false
}

// TestDockerignoreKeepsTheBuildInputs checks that .dockerignore leaves every
// directory of the module that the bridge binary is built from in the build
// context (the packages of ./cmd/bridge and the modules go.mod replaces,
// with their embedded files), and keeps .git and local data out.
func TestDockerignoreKeepsTheBuildInputs(t *testing.T) {
	data, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for line := range strings.Lines(string(data)) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	for _, want := range []string{".git", "bridge-data", "dist"} {
		if !slices.Contains(patterns, want) {
			t.Errorf(".dockerignore does not exclude %s", want)
		}
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.Dir}}{{end}}", "../cmd/bridge").Output()
	if err != nil {
		t.Fatalf("go list -deps ../cmd/bridge: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue // a dependency outside the repository
		}
		rel = filepath.ToSlash(rel)
		for _, p := range patterns {
			// .dockerignore patterns are filepath.Match patterns from the
			// context root; a match of a directory or one of its parents
			// excludes it.
			for prefix := rel; prefix != "."; prefix = filepath.ToSlash(filepath.Dir(prefix)) {
				if ok, _ := filepath.Match(p, prefix); ok {
					t.Errorf(".dockerignore pattern %q excludes %s, which the bridge binary is built from", p, rel)
				}
			}
		}
	}
}
