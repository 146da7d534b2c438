package layers

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/sluicerl/sluice"

// layer returns the layer of a package path inside the module (relative
// path), or -1 for packages the rules do not cover.
func layer(rel string) int {
	top, _, _ := strings.Cut(rel, "/")
	switch {
	case top == "clock":
		return 0
	case top == "gcra" || top == "window" || top == "aimd" || top == "breaker" || top == "retry" || top == "signal":
		return 1
	case rel == "store":
		return 2
	case rel == "internal/yamlconf":
		// The YAML walker the configuration readers (limiter, rls)
		// share: it imports nothing of the module, so it sits below them.
		return 2
	case top == "store" || top == "limiter" || top == "lease" || top == "slot" || top == "job" ||
		top == "outbound" || top == "provider" || top == "sim" || top == "auth":
		return 3
	case top == "server" || top == "rls":
		return 4
	case top == "internal" || top == "cmd":
		return 5
	case top == "examples":
		return 6
	}
	return -1
}

type pkg struct {
	ImportPath string
	Imports    []string
}

func TestImportRules(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-e", "-json=ImportPath,Imports", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	n := 0
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		n++
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		from := layer(rel)
		if from < 0 {
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				if from == 1 && strings.Contains(strings.Split(imp, "/")[0], ".") {
					t.Errorf("%s (a pure L1 package) imports third-party %s", rel, imp)
				}
				continue
			}
			irel := strings.TrimPrefix(imp, module+"/")
			to := layer(irel)
			switch {
			case from == 1 && to >= 0:
				t.Errorf("%s (a pure L1 package) imports %s: L1 packages take time as an argument and import only the standard library", rel, irel)
			case to > from:
				t.Errorf("%s (L%d) imports %s (L%d): dependencies must point down", rel, from, irel, to)
			case from == 3 && to == 3 && !strings.HasPrefix(rel, "store/") && strings.HasPrefix(irel, "store/") &&
				irel != "store/memstore":
				t.Errorf("%s is a facade and names the backend %s: facades work over store interfaces (only memstore, the embedded default, is allowed)", rel, irel)
			}
		}
	}
	if n < 5 {
		t.Fatalf("go list found only %d packages", n)
	}
}
