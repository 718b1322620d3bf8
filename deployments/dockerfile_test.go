package deployments_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, …
	args string
}

func readDockerfile(t *testing.T) []instruction {
	t.Helper()
	data, err := os.ReadFile("Dockerfile")
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
// module: the Go version of go.mod, the main package and its version variable,
// the non-root user of the manifests and the HTTP port. (No Docker engine runs
// the build here; the go build line itself is the README's.)
func TestDockerfile(t *testing.T) {
	ins := readDockerfile(t)
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
	mod, err := modfile.ParseLax("go.mod", data, nil)
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

	var build string
	for _, in := range ins {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			build = in.args
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", `go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /bridge ./cmd/bridge`} {
		if !strings.Contains(build, want) {
			t.Errorf("build step %q lacks %q", build, want)
		}
	}
	if !hasStringVar(t, "../cmd/bridge", "version") {
		t.Error("cmd/bridge has no package-level variable version for -X main.version")
	}

	if froms[1] != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("runtime stage FROM %q", froms[1])
	}
	want := map[string]string{
		"COPY":       "--from=build /bridge /bridge",
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
