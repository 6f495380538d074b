package sidecar

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	grouplisters "github.com/shutter-csi/shutter/client/listers/volumegroupsnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/csi"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

type groupContent = *groupv1.VolumeGroupSnapshotContent

// groupKind adapts VolumeGroupSnapshotContent and the group CSI calls.
type groupKind struct {
	classes grouplisters.VolumeGroupSnapshotClassLister
	csi     csi.Client
}

var groupKeys = kindKeys{
	name:                    "volumeGroupSnapshotContent",
	beingCreated:            protocol.AnnGroupBeingCreated,
	beingDeleted:            protocol.AnnGroupBeingDeleted,
	finalizer:               protocol.GroupContentBoundFinalizer,
	deletionSecretName:      protocol.AnnGroupDeletionSecretName,
	deletionSecretNamespace: protocol.AnnGroupDeletionSecretNamespace,
	createSecret:            protocol.GroupSecret,
	readSecret:              protocol.GroupGetSecret,
}

func (groupKind) keys() kindKeys { return groupKeys }

// spec: a group content is never a member; it is dynamic unless it names existing handles.
func (groupKind) spec(g groupContent) spec {
	s := spec{driver: g.Spec.Driver, dynamic: true, refUID: g.Spec.VolumeGroupSnapshotRef.UID, policy: g.Spec.DeletionPolicy}
	if h := g.Spec.Source.GroupSnapshotHandles; h != nil {
		s.dynamic, s.handle = false, h.VolumeGroupSnapshotHandle
	}
	return s
}

func (groupKind) state(g groupContent) state {
	if g.Status == nil {
		return state{}
	}
	return stateOf(g.Status.VolumeGroupSnapshotHandle, g.Status.ReadyToUse, g.Status.Error)
}

// memberHandles are the member snapshot ids of g, from status or from its pre-provisioned source.
func memberHandles(g groupContent) []string {
	var ids []string
	if g.Status != nil {
		for _, info := range g.Status.VolumeSnapshotInfoList {
			ids = append(ids, info.SnapshotHandle)
		}
	}
	if len(ids) == 0 && g.Spec.Source.GroupSnapshotHandles != nil {
		ids = g.Spec.Source.GroupSnapshotHandles.VolumeSnapshotHandles
	}
	return ids
}

func (k groupKind) class(g groupContent) (map[string]string, error) {
	return classParameters("VolumeGroupSnapshotClass", g.Spec.VolumeGroupSnapshotClassName, k.classes.Get, func(class *groupv1.VolumeGroupSnapshotClass) map[string]string { return class.Parameters })
}

func (groupKind) templates(g groupContent) protocol.TemplateValues {
	ref := g.Spec.VolumeGroupSnapshotRef
	return protocol.TemplateValues{ContentName: g.Name, SnapshotName: ref.Name, SnapshotNamespace: ref.Namespace}
}

func (groupKind) extraMetadata(g groupContent) map[string]string {
	return map[string]string{
		protocol.ParamGroupSnapshotName:        g.Spec.VolumeGroupSnapshotRef.Name,
		protocol.ParamGroupSnapshotNamespace:   g.Spec.VolumeGroupSnapshotRef.Namespace,
		protocol.ParamGroupSnapshotContentName: g.Name,
	}
}

func (k groupKind) create(ctx context.Context, g groupContent, req createRequest) (groupContent, error) {
	s, err := k.csi.CreateGroupSnapshot(ctx, csi.CreateGroupSnapshotRequest{
		Name: req.name, SourceVolumeIDs: g.Spec.Source.VolumeHandles, Parameters: req.parameters, Secrets: req.secrets,
	})
	if err != nil {
		return nil, err
	}
	return withGroupSnapshot(g, s), nil
}

func (k groupKind) read(ctx context.Context, g groupContent, secrets map[string]string) (groupContent, error) {
	handle := g.Spec.Source.GroupSnapshotHandles.VolumeGroupSnapshotHandle
	s, err := k.csi.GetGroupSnapshot(ctx, handle, memberHandles(g), secrets)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, fmt.Errorf("group snapshot handle %s: %w", handle, errUnknownHandle)
	}
	return withGroupSnapshot(g, s), nil
}

func (k groupKind) remove(ctx context.Context, g groupContent, handle string, secrets map[string]string) error {
	return k.csi.DeleteGroupSnapshot(ctx, handle, memberHandles(g), secrets)
}

// withGroupSnapshot returns g with the driver's answer in status and no error.
func withGroupSnapshot(g groupContent, s *csi.GroupSnapshot) groupContent {
	g = g.DeepCopy()
	if g.Status == nil {
		g.Status = &groupv1.VolumeGroupSnapshotContentStatus{}
	}
	g.Status.VolumeGroupSnapshotHandle = ptr.To(s.ID)
	g.Status.ReadyToUse = ptr.To(s.ReadyToUse)
	g.Status.CreationTime = nil
	if !s.CreationTime.IsZero() {
		g.Status.CreationTime = &metav1.Time{Time: s.CreationTime}
	}
	g.Status.VolumeSnapshotInfoList = nil
	for _, m := range s.Snapshots {
		info := groupv1.VolumeSnapshotInfo{
			VolumeHandle: m.SourceVolumeID, SnapshotHandle: m.ID,
			ReadyToUse: ptr.To(m.ReadyToUse), RestoreSize: ptr.To(m.SizeBytes),
		}
		if !m.CreationTime.IsZero() {
			info.CreationTime = ptr.To(m.CreationTime.UnixNano())
		}
		g.Status.VolumeSnapshotInfoList = append(g.Status.VolumeSnapshotInfoList, info)
	}
	g.Status.Error = nil
	return g
}

func (groupKind) withStatus(g groupContent) (groupContent, statusFields) {
	g = g.DeepCopy()
	if g.Status == nil {
		g.Status = &groupv1.VolumeGroupSnapshotContentStatus{}
	}
	return g, statusFields{handle: &g.Status.VolumeGroupSnapshotHandle, ready: &g.Status.ReadyToUse, err: &g.Status.Error}
}
