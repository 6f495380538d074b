package chart

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/shutter-csi/shutter/test/testenv"
)

// TestNotesOnPodSecurity installs the chart in dry runs against a real API server (so NOTES.txt
// looks the release namespace up) and checks that NOTES.txt warns when the driver's privileged
// pod goes into a namespace the chart did not create and could not label, says what that
// namespace enforces, and is quiet when it allows privileged pods or the chart makes the driver
// a namespace of its own.
func TestNotesOnPodSecurity(t *testing.T) {
	e := testenv.Start(t)
	testenv.InstallCRDs(t, e.Config)
	kube := kubernetes.NewForConfigOrDie(e.Config)
	labelled := func(enforce string) string {
		ns := testenv.Namespace(t, kube)
		if enforce != "" {
			obj, err := kube.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			obj.Labels["pod-security.kubernetes.io/enforce"] = enforce
			if _, err := kube.CoreV1().Namespaces().Update(context.Background(), obj, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		return ns
	}
	for _, tc := range []struct {
		name string
		ns   string
		args []string
		want string // "" for no warning
	}{
		{name: "restricted", ns: labelled("restricted"), want: `The namespace enforces Pod Security "restricted", which rejects the driver's pod.`},
		{name: "no label", ns: labelled(""), want: "The namespace has no pod-security.kubernetes.io/enforce label"},
		{name: "privileged", ns: labelled("privileged")},
		{name: "the driver's own namespace", ns: labelled("restricted"), args: []string{"--set", "hostpath.namespace=shutter-driver-notes"}},
		{name: "no driver", ns: labelled("restricted"), args: []string{"--set", "hostpath.enabled=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"install", "notes", testenv.ChartDir(), "-n", tc.ns, "--dry-run=server",
				"--kubeconfig", e.Kubeconfig}, tc.args...)
			out, err := exec.Command(helm(t), args...).CombinedOutput()
			if err != nil {
				t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			notes := string(out[strings.Index(string(out), "NOTES:"):])
			switch {
			case tc.want == "" && strings.Contains(notes, "WARNING"):
				t.Errorf("a warning:\n%s", notes)
			case tc.want != "" && (!strings.Contains(notes, "WARNING: the hostpath driver's pod is privileged") || !strings.Contains(notes, tc.want) ||
				!strings.Contains(notes, "kubectl label namespace "+tc.ns+" pod-security.kubernetes.io/enforce=privileged")):
				t.Errorf("want a warning with %q:\n%s", tc.want, notes)
			}
		})
	}
}
