package snapshotmetadata

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// target is a VolumeSnapshot resolved to its bound content.
type target struct {
	snapshot *snapshotv1.VolumeSnapshot
	content  *snapshotv1.VolumeSnapshotContent
	// handle is the driver's snapshot id; volume the source volume's handle ("" for a
	// pre-provisioned content, which does not record it).
	handle, volume string
}

// resolve reads the VolumeSnapshot namespace/name and its bound content and returns the
// content's snapshot handle. Both must be ready and the content must be this driver's.
func (s *Server) resolve(ctx context.Context, namespace, name string) (target, error) {
	vs, err := s.cfg.Snapshots.SnapshotV1().VolumeSnapshots(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return target{}, status.Errorf(codes.NotFound, "VolumeSnapshot %s/%s not found", namespace, name)
	case err != nil:
		return target{}, status.Errorf(codes.Unavailable, "read VolumeSnapshot %s/%s: %v", namespace, name, err)
	}
	st := ptr.Deref(vs.Status, snapshotv1.VolumeSnapshotStatus{})
	contentName := ptr.Deref(st.BoundVolumeSnapshotContentName, "")
	if contentName == "" || !ptr.Deref(st.ReadyToUse, false) {
		return target{}, status.Errorf(codes.Unavailable, "VolumeSnapshot %s/%s is not ready to use yet", namespace, name)
	}
	c, err := s.cfg.Snapshots.SnapshotV1().VolumeSnapshotContents().Get(ctx, contentName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return target{}, status.Errorf(codes.NotFound, "VolumeSnapshotContent %s of VolumeSnapshot %s/%s not found", contentName, namespace, name)
	case err != nil:
		return target{}, status.Errorf(codes.Unavailable, "read VolumeSnapshotContent %s: %v", contentName, err)
	}
	if c.Spec.Driver != s.cfg.Driver {
		return target{}, status.Errorf(codes.InvalidArgument, "VolumeSnapshot %s/%s belongs to CSI driver %s, this service serves %s",
			namespace, name, c.Spec.Driver, s.cfg.Driver)
	}
	cst := ptr.Deref(c.Status, snapshotv1.VolumeSnapshotContentStatus{})
	handle := ptr.Deref(cst.SnapshotHandle, "")
	if handle == "" || !ptr.Deref(cst.ReadyToUse, false) {
		return target{}, status.Errorf(codes.Unavailable, "VolumeSnapshotContent %s of VolumeSnapshot %s/%s is not ready to use yet", contentName, namespace, name)
	}
	return target{snapshot: vs, content: c, handle: handle, volume: ptr.Deref(c.Spec.Source.VolumeHandle, "")}, nil
}

// checkBase refuses a delta whose base snapshot handle is recorded by a content of another
// driver or of another volume than the target's. A handle no content records (its
// VolumeSnapshot and content were deleted, the backend snapshot kept) is left to the driver,
// which knows its snapshots.
func (s *Server) checkBase(t target, base string) error {
	if s.cfg.ContentsByHandle == nil {
		return nil
	}
	for _, c := range s.cfg.ContentsByHandle(base) {
		if c.Spec.Driver != s.cfg.Driver {
			continue // another driver's handle that happens to be equal: not this one's snapshot
		}
		if vol := ptr.Deref(c.Spec.Source.VolumeHandle, ""); vol != "" && t.volume != "" && vol != t.volume {
			return status.Errorf(codes.InvalidArgument, "base snapshot %s (VolumeSnapshotContent %s) is of volume %s, target VolumeSnapshot %s/%s of volume %s: a delta needs two snapshots of one volume",
				base, c.Name, vol, t.snapshot.Namespace, t.snapshot.Name, t.volume)
		}
	}
	return nil
}

// secrets reads the snapshotter secret that the target's VolumeSnapshotClass names (the
// snapshot's class, else the content's, else the driver's default class), as the csi-snapshotter
// passes it to CreateSnapshot. No class, or a class naming no secret, means no secrets.
func (s *Server) secrets(ctx context.Context, t target) (map[string]string, error) {
	class, err := s.class(ctx, t)
	if err != nil || class == nil {
		return nil, err
	}
	ref, err := protocol.ResolveSecret(class.Parameters, protocol.SnapshotterSecret, protocol.TemplateValues{
		ContentName: t.content.Name, SnapshotName: t.snapshot.Name, SnapshotNamespace: t.snapshot.Namespace,
	})
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "VolumeSnapshotClass %s: %v", class.Name, err)
	}
	if ref == nil {
		return nil, nil
	}
	secret, err := s.cfg.Kube.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "read the snapshotter secret %s of VolumeSnapshotClass %s: %v", ref, class.Name, err)
	}
	out := make(map[string]string, len(secret.Data))
	for k, v := range secret.Data {
		out[k] = string(v)
	}
	return out, nil
}

// class finds the target's VolumeSnapshotClass; nil when it names none and the driver has no
// single default class.
func (s *Server) class(ctx context.Context, t target) (*snapshotv1.VolumeSnapshotClass, error) {
	name := ptr.Deref(t.snapshot.Spec.VolumeSnapshotClassName, ptr.Deref(t.content.Spec.VolumeSnapshotClassName, ""))
	classes := s.cfg.Snapshots.SnapshotV1().VolumeSnapshotClasses()
	if name != "" {
		c, err := classes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "read VolumeSnapshotClass %s: %v", name, err)
		}
		return c, nil
	}
	list, err := classes.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "list VolumeSnapshotClasses: %v", err)
	}
	var found *snapshotv1.VolumeSnapshotClass
	for i, c := range list.Items {
		if c.Driver != s.cfg.Driver || c.Annotations[protocol.AnnDefaultClass] != "true" {
			continue
		}
		if found != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "CSI driver %s has several default VolumeSnapshotClasses (%s, %s)", s.cfg.Driver, found.Name, c.Name)
		}
		found = &list.Items[i]
	}
	return found, nil
}
