package crd

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"

	"github.com/shutter-csi/shutter/test/testenv"
)

// TestPrinterColumnsAndShortNames reads the kinds through kubectl, as an operator would.
func TestPrinterColumnsAndShortNames(t *testing.T) {
	env := testenv.Start(t)
	testenv.InstallCRDs(t, env.Config)
	ns := testenv.Namespace(t, kubernetes.NewForConfigOrDie(env.Config))
	bin, err := testenv.Tools("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", env.Kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	established := map[string]string{}
	for _, line := range strings.Split(kubectl("get", "crd", "--no-headers", "-o",
		`custom-columns=NAME:.metadata.name,ESTABLISHED:.status.conditions[?(@.type=="Established")].status`), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			established[f[0]] = f[1]
		}
	}
	for _, crd := range []string{
		"volumesnapshots.snapshot.storage.k8s.io", "volumesnapshotcontents.snapshot.storage.k8s.io",
		"volumesnapshotclasses.snapshot.storage.k8s.io", "volumegroupsnapshots.groupsnapshot.storage.k8s.io",
		"volumegroupsnapshotcontents.groupsnapshot.storage.k8s.io",
		"volumegroupsnapshotclasses.groupsnapshot.storage.k8s.io", "snapshotschedules.snapshot.shutter.dev",
	} {
		if established[crd] != "True" {
			t.Errorf("kubectl get crd: %s is not Established (%q)", crd, established[crd])
		}
	}

	name := "columns-" + ns
	objects := []string{
		`{"apiVersion":"snapshot.storage.k8s.io/v1","kind":"VolumeSnapshot","metadata":{"name":"NAME","namespace":"NS"},"spec":{"source":{"persistentVolumeClaimName":"pvc"}}}`,
		`{"apiVersion":"snapshot.storage.k8s.io/v1","kind":"VolumeSnapshotContent","metadata":{"name":"NAME"},"spec":{"deletionPolicy":"Delete","driver":"d","source":{"volumeHandle":"v"},"volumeSnapshotRef":{"name":"s","namespace":"NS"}}}`,
		`{"apiVersion":"snapshot.storage.k8s.io/v1","kind":"VolumeSnapshotClass","metadata":{"name":"NAME"},"driver":"d","deletionPolicy":"Delete"}`,
		`{"apiVersion":"groupsnapshot.storage.k8s.io/v1","kind":"VolumeGroupSnapshot","metadata":{"name":"NAME","namespace":"NS"},"spec":{"source":{"selector":{"matchLabels":{"a":"b"}}}}}`,
		`{"apiVersion":"groupsnapshot.storage.k8s.io/v1","kind":"VolumeGroupSnapshotContent","metadata":{"name":"NAME"},"spec":{"deletionPolicy":"Delete","driver":"d","source":{"volumeHandles":["v"]},"volumeGroupSnapshotRef":{"name":"g","namespace":"NS"}}}`,
		`{"apiVersion":"groupsnapshot.storage.k8s.io/v1","kind":"VolumeGroupSnapshotClass","metadata":{"name":"NAME"},"driver":"d","deletionPolicy":"Delete"}`,
		`{"apiVersion":"snapshot.shutter.dev/v1alpha1","kind":"SnapshotSchedule","metadata":{"name":"NAME","namespace":"NS"},"spec":{"schedule":"@hourly","timeZone":"Europe/Berlin","claimSelector":{}}}`,
	}
	for _, obj := range objects {
		cmd := exec.Command(filepath.Join(bin, "kubectl"), "--kubeconfig", env.Kubeconfig, "create", "-f", "-")
		cmd.Stdin = strings.NewReader(strings.NewReplacer("NAME", name, "NS", ns).Replace(obj))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl create: %v\n%s", err, out)
		}
	}
	t.Cleanup(func() {
		for _, kind := range []string{"vsc", "vsclass", "vgsc", "vgsclass"} {
			_ = exec.Command(filepath.Join(bin, "kubectl"), "--kubeconfig", env.Kubeconfig, "delete", kind, name).Run()
		}
	})

	tests := []struct {
		shortNames []string
		namespaced bool
		header     string
	}{
		{[]string{"vs", "volumesnapshot"}, true, "NAME READYTOUSE SOURCEPVC SOURCESNAPSHOTCONTENT RESTORESIZE SNAPSHOTCLASS SNAPSHOTCONTENT CREATIONTIME AGE"},
		{[]string{"vsc", "vscs"}, false, "NAME READYTOUSE RESTORESIZE DELETIONPOLICY DRIVER VOLUMESNAPSHOTCLASS VOLUMESNAPSHOT VOLUMESNAPSHOTNAMESPACE AGE"},
		{[]string{"vsclass", "vsclasses"}, false, "NAME DRIVER DELETIONPOLICY AGE"},
		{[]string{"vgs"}, true, "NAME READYTOUSE VOLUMEGROUPSNAPSHOTCLASS VOLUMEGROUPSNAPSHOTCONTENT CREATIONTIME AGE"},
		{[]string{"vgsc", "vgscs"}, false, "NAME READYTOUSE DELETIONPOLICY DRIVER VOLUMEGROUPSNAPSHOTCLASS VOLUMEGROUPSNAPSHOTNAMESPACE VOLUMEGROUPSNAPSHOT AGE"},
		{[]string{"vgsclass", "vgsclasses"}, false, "NAME DRIVER DELETIONPOLICY AGE"},
		{[]string{"snapsched", "snapshotschedule"}, true, "NAME SCHEDULE TIMEZONE SUSPEND READY KEPT LASTSCHEDULE AGE"},
	}
	for _, tc := range tests {
		for _, short := range tc.shortNames {
			args := []string{"get", short, name}
			if tc.namespaced {
				args = append(args, "-n", ns)
			}
			out := kubectl(args...)
			if got := strings.Join(strings.Fields(strings.SplitN(out, "\n", 2)[0]), " "); got != tc.header {
				t.Errorf("kubectl get %s header:\n got %s\nwant %s", short, got, tc.header)
			}
			if !strings.Contains(out, name) {
				t.Errorf("kubectl get %s does not show %s:\n%s", short, name, out)
			}
		}
	}
}
