// Package kubetest holds test helpers for the users of package kube.
package kubetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// writeVerbs are the methods of typed Kubernetes clients that change objects.
var writeVerbs = []string{"Create", "Update", "UpdateStatus", "Patch", "Apply", "ApplyStatus", "Delete", "DeleteCollection"}

// kubePackage is package kube, whose Client interface is a typed client too.
const kubePackage = "github.com/shutter-csi/shutter/pkg/kube"

// DirectWrites type-checks the Go package in dir (its non-test files, as the go command builds
// it) and returns every use, called or not, of a write method of a typed Kubernetes client
// (client-go's, a generated clientset's, or kube.Client) in a file whose base name is not in
// allowed, as "file.go:line: expression". A package whose writes all go through its write layer
// returns none.
func DirectWrites(dir string, allowed ...string) ([]string, error) {
	pkg, exports, err := list(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range pkg.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(pkg.Dir, name), nil, 0)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	lookup := func(path string) (io.ReadCloser, error) {
		if exports[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(exports[path])
	}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", lookup)}
	info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}}
	if _, err := conf.Check(pkg.ImportPath, fset, files, info); err != nil {
		return nil, err
	}
	var out []string
	for expr, sel := range info.Selections {
		pos := fset.Position(expr.Pos())
		if slices.Contains(allowed, filepath.Base(pos.Filename)) || !isClientWrite(sel) {
			continue
		}
		out = append(out, fmt.Sprintf("%s:%d: %s", filepath.Base(pos.Filename), pos.Line, types.ExprString(expr)))
	}
	sort.Strings(out)
	return out, nil
}

// NoDirectWrites fails t for every write DirectWrites finds in dir outside the allowed files:
// the test a package whose writes all go through its write layer runs as TestNoDirectWrites.
func NoDirectWrites(t testing.TB, dir string, allowed ...string) {
	t.Helper()
	found, err := DirectWrites(dir, allowed...)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("a write around the write layer: %s", f)
	}
}

// isClientWrite tells whether sel is a write method of a typed client.
func isClientWrite(sel *types.Selection) bool {
	fn, ok := sel.Obj().(*types.Func)
	if !ok || fn.Pkg() == nil || !slices.Contains(writeVerbs, fn.Name()) {
		return false
	}
	path := fn.Pkg().Path()
	switch {
	case strings.HasPrefix(path, "k8s.io/client-go/"), strings.Contains(path, "/clientset/"):
		return true
	case path == kubePackage:
		_, isInterface := sel.Recv().Underlying().(*types.Interface)
		return isInterface
	}
	return false
}

// listed is what the go command says of a package.
type listed struct {
	ImportPath, Dir, Export string
	GoFiles                 []string
}

// list returns the package in dir and the export data file of every package it depends on.
func list(dir string) (listed, map[string]string, error) {
	cmd := exec.Command("go", "list", "-export", "-deps", "-json=ImportPath,Dir,Export,GoFiles", ".")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	data, err := cmd.Output()
	if err != nil {
		return listed{}, nil, fmt.Errorf("go list: %w: %s", err, stderr.String())
	}
	exports := map[string]string{}
	var last listed
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return listed{}, nil, err
		}
		exports[p.ImportPath] = p.Export
		last = p // -deps lists the package itself last
	}
	return last, exports, nil
}
