package snapshot

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/shutter-csi/shutter/pkg/controller"
)

var everything = labels.Everything()

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// keys lists the queue keys of every object a lister holds.
func keys[T metav1.Object](list func(labels.Selector) ([]T, error)) []controller.Key {
	objs, err := list(everything)
	if err != nil {
		return nil
	}
	out := make([]controller.Key, 0, len(objs))
	for _, o := range objs {
		out = append(out, controller.KeyOf(o))
	}
	return out
}
