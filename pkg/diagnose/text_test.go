package diagnose

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// Escape sequences a tenant could put into a snapshot's name, annotations, status or events:
// erase the line, set the admin's clipboard (OSC 52), the C1 form of CSI, a right-to-left
// override, and a line break that would start a forged "Why:" line.
const (
	eraseLine = "\x1b[2K"
	clipboard = "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07"
	c1CSI     = "\u009b2J"
	rlo       = "\u202e"
	fakeLine  = "\nWhy: everything is fine"
)

// TestTextOutputEscapesControlCharacters: describe's tree and stuck's table show every text of
// the objects with its control characters escaped; JSON keeps them exact.
func TestTextOutputEscapesControlCharacters(t *testing.T) {
	node := &Node{Kind: "VolumeSnapshot", Namespace: "ns", Name: "snap" + eraseLine, State: "Pending",
		Details:     []string{"status.error: " + clipboard},
		Annotations: []Annotation{{Key: "k", Value: "v" + c1CSI, Meaning: "m"}},
		Events:      []string{"1m ago Warning Failed: x" + fakeLine},
		Children:    []*Node{{Kind: "Driver", Name: "d" + rlo, State: "NoSidecar"}}}
	var tree bytes.Buffer
	printTree(&tree, node, "", "")
	var table bytes.Buffer
	if err := printStuck(&table, []Item{{Kind: "VolumeSnapshot", Namespace: "ns", Name: "snap" + eraseLine, Age: "1m",
		Driver: "d", Phase: "Pending", Rule: RuleNoSidecar, Reason: "r" + clipboard + fakeLine}}, true); err != nil {
		t.Fatal(err)
	}
	for what, out := range map[string]string{"tree": tree.String(), "table": table.String()} {
		for _, r := range out {
			if r != '\n' && unsafeRune(r) {
				t.Errorf("%s: raw %U in %q", what, r, out)
			}
		}
		if strings.Contains(out, "\nWhy:") {
			t.Errorf("%s: a forged line: %q", what, out)
		}
	}
	for _, want := range []string{`VolumeSnapshot ns/snap\x1b[2K [Pending]`, `status.error: \x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07`,
		`k=v\x9b2J: m`, `event 1m ago Warning Failed: x\x0aWhy: everything is fine`, `Driver d\u202e [NoSidecar]`} {
		if !strings.Contains(tree.String(), want) {
			t.Errorf("tree lacks %q:\n%s", want, tree.String())
		}
	}
	if want := `snap\x1b[2K`; !strings.Contains(table.String(), want) || !strings.Contains(table.String(), `r\x1b]52;c;`) {
		t.Errorf("table lacks %q:\n%s", want, table.String())
	}

	var structured bytes.Buffer
	if err := writeStructured(&structured, OutputJSON, node); err != nil {
		t.Fatal(err)
	}
	var back Node
	if err := json.Unmarshal(structured.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Name != node.Name || back.Details[0] != node.Details[0] || back.Events[0] != node.Events[0] || back.Children[0].Name != "d"+rlo {
		t.Errorf("JSON changed the texts: %+v", back)
	}
}
