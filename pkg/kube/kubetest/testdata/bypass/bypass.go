// Package bypass writes objects both through a kube.Writer and around it, for DirectWrites' test.
package bypass

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/shutter-csi/shutter/pkg/kube"
)

func writes(ctx context.Context, c kubernetes.Interface, w *kube.Writer[*corev1.PersistentVolumeClaim], pvc *corev1.PersistentVolumeClaim) {
	_, _ = w.Create(ctx, pvc)
	_, _ = c.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "a", metav1.GetOptions{})
	_ = c.CoreV1().PersistentVolumeClaims("ns").Delete(ctx, "a", metav1.DeleteOptions{})
	patch := c.CoreV1().PersistentVolumeClaims("ns").Patch
	_ = patch
	var client kube.Client[*corev1.PersistentVolumeClaim] = c.CoreV1().PersistentVolumeClaims("ns")
	_, _ = client.UpdateStatus(ctx, pvc, metav1.UpdateOptions{})
}
