package sidecar

import (
	"context"
	"fmt"

	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	listers "github.com/shutter-csi/shutter/client/listers/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/csi"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

type content = *snapshotv1.VolumeSnapshotContent

// contentKind adapts VolumeSnapshotContent and the single-snapshot CSI calls.
type contentKind struct {
	classes listers.VolumeSnapshotClassLister
	csi     csi.Client
}

var contentKeys = kindKeys{
	name:                    "volumeSnapshotContent",
	beingCreated:            protocol.AnnBeingCreated,
	beingDeleted:            protocol.AnnBeingDeleted,
	finalizer:               protocol.ContentBoundFinalizer,
	deletionSecretName:      protocol.AnnDeletionSecretName,
	deletionSecretNamespace: protocol.AnnDeletionSecretNamespace,
	createSecret:            protocol.SnapshotterSecret,
	readSecret:              protocol.SnapshotterListSecret,
}

func (contentKind) keys() kindKeys { return contentKeys }

func (contentKind) spec(c content) spec {
	_, member := c.Annotations[protocol.AnnGroupSnapshotHandle]
	return spec{driver: c.Spec.Driver, member: member, dynamic: c.Spec.Source.VolumeHandle != nil,
		refUID: c.Spec.VolumeSnapshotRef.UID, policy: c.Spec.DeletionPolicy, handle: ptr.Deref(c.Spec.Source.SnapshotHandle, ""),
		inGroup: c.Status != nil && ptr.Deref(c.Status.VolumeGroupSnapshotHandle, "") != ""}
}

func (contentKind) state(c content) state {
	if c.Status == nil {
		return state{}
	}
	return stateOf(c.Status.SnapshotHandle, c.Status.ReadyToUse, c.Status.Error)
}

func (k contentKind) class(c content) (map[string]string, error) {
	return classParameters("VolumeSnapshotClass", c.Spec.VolumeSnapshotClassName, k.classes.Get, func(class *snapshotv1.VolumeSnapshotClass) map[string]string { return class.Parameters })
}

func (contentKind) templates(c content) protocol.TemplateValues {
	return protocol.TemplateValues{ContentName: c.Name, SnapshotName: c.Spec.VolumeSnapshotRef.Name, SnapshotNamespace: c.Spec.VolumeSnapshotRef.Namespace}
}

func (contentKind) extraMetadata(c content) map[string]string {
	return map[string]string{
		protocol.ParamSnapshotName:        c.Spec.VolumeSnapshotRef.Name,
		protocol.ParamSnapshotNamespace:   c.Spec.VolumeSnapshotRef.Namespace,
		protocol.ParamSnapshotContentName: c.Name,
	}
}

func (k contentKind) create(ctx context.Context, c content, req createRequest) (content, error) {
	s, err := k.csi.CreateSnapshot(ctx, csi.CreateSnapshotRequest{
		Name: req.name, SourceVolumeID: ptr.Deref(c.Spec.Source.VolumeHandle, ""), Parameters: req.parameters, Secrets: req.secrets,
	})
	if err != nil {
		return nil, err
	}
	return withSnapshot(c, s), nil
}

func (k contentKind) read(ctx context.Context, c content, secrets map[string]string) (content, error) {
	handle := ptr.Deref(c.Spec.Source.SnapshotHandle, "")
	s, err := k.csi.GetSnapshot(ctx, handle, secrets)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, fmt.Errorf("snapshot handle %s: %w", handle, errUnknownHandle)
	}
	return withSnapshot(c, s), nil
}

func (k contentKind) remove(ctx context.Context, _ content, handle string, secrets map[string]string) error {
	return k.csi.DeleteSnapshot(ctx, handle, secrets)
}

// withSnapshot returns c with the driver's answer in status and no error.
func withSnapshot(c content, s *csi.Snapshot) content {
	c = c.DeepCopy()
	if c.Status == nil {
		c.Status = &snapshotv1.VolumeSnapshotContentStatus{}
	}
	c.Status.SnapshotHandle = ptr.To(s.ID)
	c.Status.ReadyToUse = ptr.To(s.ReadyToUse)
	c.Status.RestoreSize = ptr.To(s.SizeBytes)
	c.Status.CreationTime = nil
	if !s.CreationTime.IsZero() {
		c.Status.CreationTime = ptr.To(s.CreationTime.UnixNano())
	}
	if s.GroupID != "" {
		c.Status.VolumeGroupSnapshotHandle = ptr.To(s.GroupID)
	}
	c.Status.Error = nil
	return c
}

func (contentKind) withStatus(c content) (content, statusFields) {
	c = c.DeepCopy()
	if c.Status == nil {
		c.Status = &snapshotv1.VolumeSnapshotContentStatus{}
	}
	return c, statusFields{handle: &c.Status.SnapshotHandle, ready: &c.Status.ReadyToUse, err: &c.Status.Error}
}
