package node

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/shutter-csi/shutter/test/testenv"
)

// registry is a loopback HTTP server in the node's place of a registry: it answers 404 to every
// request and hands the request's method and URL to requests.
type registry struct {
	addr     string
	requests chan string
}

// startRegistry starts a registry on 127.0.0.1 for the rest of the test.
func startRegistry(t *testing.T) *registry {
	t.Helper()
	r := &registry{requests: make(chan string, 100)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		select {
		case r.requests <- req.Method + " " + req.URL.String():
		default:
		}
		http.NotFound(w, req)
	}))
	t.Cleanup(srv.Close)
	r.addr = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// unknownImage names a registry that no folder of containerd's registry configuration names, so
// the "_default" one applies, as it does to any registry's name. It is a loopback address with
// nothing behind it, so that even a node whose configuration were broken would not reach past
// loopback here.
const unknownImage = "127.0.0.2:5000/shutter/unknown:1"

// unknownImageStaysOnLoopback: a pod of an image the node does not hold with pull policy Never
// waits in ErrImageNeverPull and nothing is pulled; with IfNotPresent the pull goes to the node's
// registry on loopback (the request, for the image's registry by name, reaches the test's
// listener) and fails there.
func unknownImageStaysOnLoopback(t *testing.T, ctx context.Context, cs kubernetes.Interface, r *registry) {
	never := unknownImagePod("never-pull", corev1.PullNever)
	createPod(t, ctx, cs, never)
	waitWaiting(t, cs, never.Name, "ErrImageNeverPull")
	select {
	case req := <-r.requests:
		t.Errorf("with pull policy Never the registry was asked %s", req)
	default:
	}

	pull := unknownImagePod("if-not-present", corev1.PullIfNotPresent)
	createPod(t, ctx, cs, pull)
	// The image's manifest, asked for on behalf of the registry the image names.
	wantPath, wantNS := " /v2/shutter/unknown/manifests/1?", "ns=127.0.0.2%3A5000"
	deadline := time.After(2 * time.Minute)
	for seen := false; !seen; {
		select {
		case req := <-r.requests:
			seen = strings.Contains(req, wantPath) && strings.Contains(req, wantNS)
			t.Logf("registry asked %s", req)
		case <-deadline:
			t.Fatalf("no request for%s%s reached the node's registry on %s", wantPath, wantNS, r.addr)
		}
	}
	// "not found": the answer of the test's registry (a closed port would be refused).
	pod := waitWaiting(t, cs, pull.Name, "ErrImagePull", "ImagePullBackOff")
	if msg := pod.Status.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, unknownImage+": not found") {
		t.Errorf("pull error %q, want %s: not found, the answer of the node's registry", msg, unknownImage)
	}
	for _, p := range []*corev1.Pod{never, pull} {
		if err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Error(err)
		}
	}
}

func unknownImagePod(name string, policy corev1.PullPolicy) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			HostNetwork:   true,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "c", Image: unknownImage, ImagePullPolicy: policy}},
		},
	}
}

// waitWaiting waits until the first container of pod name in namespace default waits for one of
// reasons, and returns the pod.
func waitWaiting(t *testing.T, cs kubernetes.Interface, name string, reasons ...string) *corev1.Pod {
	t.Helper()
	return testenv.WaitFor(t, "pod "+name+" waiting for "+strings.Join(reasons, " or "), 3*time.Minute,
		func(ctx context.Context) (*corev1.Pod, error) {
			return cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		},
		func(p *corev1.Pod) bool {
			if p == nil || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Waiting == nil {
				return false
			}
			for _, r := range reasons {
				if p.Status.ContainerStatuses[0].State.Waiting.Reason == r {
					return true
				}
			}
			return false
		})
}
