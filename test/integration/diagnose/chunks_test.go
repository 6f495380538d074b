package diagnose

import (
	"encoding/json"
	"testing"

	"github.com/shutter-csi/shutter/pkg/diagnose"
)

// TestStuckReadsEveryChunk: with lists read one object per chunk, stuck still finds every stuck
// snapshot, its claim and its missing class.
func TestStuckReadsEveryChunk(t *testing.T) {
	f := newFixture(t)
	f.boundClaim("data")
	for _, name := range []string{"snap-a", "snap-b", "snap-c"} {
		f.snapshot(name, "data", "missing-"+f.ns, nil)
	}
	var list diagnose.StuckList
	if err := json.Unmarshal([]byte(f.run("stuck", "--for=0", "--chunk-size=1", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	found := map[string]diagnose.Rule{}
	for _, it := range list.Items {
		found[it.Name] = it.Rule
	}
	for _, name := range []string{"snap-a", "snap-b", "snap-c"} {
		if found[name] != diagnose.RuleClassNotFound {
			t.Errorf("%s: rule %q, want %q (items %+v)", name, found[name], diagnose.RuleClassNotFound, list.Items)
		}
	}
}
