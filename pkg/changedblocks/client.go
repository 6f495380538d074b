// Package changedblocks is a client of the Kubernetes SnapshotMetadata service (KEP-3314): it
// finds a driver's service through its SnapshotMetadataService, gets a token for the service's
// audience, lists the allocated or changed block ranges of snapshots and applies ranges from one
// copy of a volume onto another. `kubectl shutter changed-blocks` is built on it.
package changedblocks

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"

	api "github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
)

// Range is one block range: Size bytes from Offset.
type Range struct {
	Offset int64 `json:"byteOffset"`
	Size   int64 `json:"sizeBytes"`
}

// Batch is one message of the service's stream.
type Batch struct {
	Type     string  `json:"blockMetadataType"`
	Capacity int64   `json:"volumeCapacityBytes"`
	Ranges   []Range `json:"blockMetadata"`
}

// Service is a connection to one driver's SnapshotMetadata service.
type Service struct {
	// Driver is the CSI driver; Audience the audience the service requires of tokens.
	Driver, Audience string
	conn             *grpc.ClientConn
	client           api.SnapshotMetadataClient
}

// Dial connects to the service that the SnapshotMetadataService named driver announces,
// trusting only its CA bundle.
func Dial(ctx context.Context, snapshots clientset.Interface, driver string) (*Service, error) {
	sms, err := snapshots.CbtV1beta1().SnapshotMetadataServices().Get(ctx, driver, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("SnapshotMetadataService of driver %s: %w", driver, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(sms.Spec.CACert) {
		return nil, fmt.Errorf("SnapshotMetadataService %s: caCert holds no PEM certificate", driver)
	}
	creds := credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	conn, err := grpc.NewClient(sms.Spec.Address, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("SnapshotMetadataService %s: address %q: %w", driver, sms.Spec.Address, err)
	}
	return &Service{Driver: driver, Audience: sms.Spec.Audience, conn: conn, client: api.NewSnapshotMetadataClient(conn)}, nil
}

// Close closes the connection.
func (s *Service) Close() error { return s.conn.Close() }

// Request selects ranges: of Snapshot alone (allocated), or changed since the snapshot whose
// CSI handle is BaseID (delta).
type Request struct {
	Token, Namespace, Snapshot, BaseID string
	StartingOffset                     int64
	MaxResults                         int32
}

// List streams the ranges req selects to each, batch by batch, until the stream ends.
func (s *Service) List(ctx context.Context, req Request, each func(Batch) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream when each fails
	if req.BaseID == "" {
		stream, err := s.client.GetMetadataAllocated(ctx, &api.GetMetadataAllocatedRequest{
			SecurityToken: req.Token, Namespace: req.Namespace, SnapshotName: req.Snapshot,
			StartingOffset: req.StartingOffset, MaxResults: req.MaxResults,
		})
		if err != nil {
			return err
		}
		return drain(stream.Recv, each)
	}
	stream, err := s.client.GetMetadataDelta(ctx, &api.GetMetadataDeltaRequest{
		SecurityToken: req.Token, Namespace: req.Namespace, BaseSnapshotId: req.BaseID, TargetSnapshotName: req.Snapshot,
		StartingOffset: req.StartingOffset, MaxResults: req.MaxResults,
	})
	if err != nil {
		return err
	}
	return drain(stream.Recv, each)
}

type response interface {
	GetBlockMetadataType() api.BlockMetadataType
	GetVolumeCapacityBytes() int64
	GetBlockMetadata() []*api.BlockMetadata
}

func drain[R response](recv func() (R, error), each func(Batch) error) error {
	for {
		r, err := recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		b := Batch{Type: r.GetBlockMetadataType().String(), Capacity: r.GetVolumeCapacityBytes(), Ranges: make([]Range, len(r.GetBlockMetadata()))}
		for i, m := range r.GetBlockMetadata() {
			b.Ranges[i] = Range{Offset: m.GetByteOffset(), Size: m.GetSizeBytes()}
		}
		if err := each(b); err != nil {
			return err
		}
	}
}

// Snapshot is a VolumeSnapshot resolved to its bound content.
type Snapshot struct {
	Handle, Driver string
}

// Resolve reads the VolumeSnapshot namespace/name and its content: the CSI snapshot handle (a
// delta's base is given by it) and the driver (whose service serves the snapshot).
func Resolve(ctx context.Context, snapshots clientset.Interface, namespace, name string) (Snapshot, error) {
	vs, err := snapshots.SnapshotV1().VolumeSnapshots(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Snapshot{}, err
	}
	st := ptr.Deref(vs.Status, snapshotv1.VolumeSnapshotStatus{})
	content := ptr.Deref(st.BoundVolumeSnapshotContentName, "")
	if content == "" {
		return Snapshot{}, fmt.Errorf("VolumeSnapshot %s/%s is not bound to a content yet", namespace, name)
	}
	c, err := snapshots.SnapshotV1().VolumeSnapshotContents().Get(ctx, content, metav1.GetOptions{})
	if err != nil {
		return Snapshot{}, err
	}
	handle := ptr.Deref(ptr.Deref(c.Status, snapshotv1.VolumeSnapshotContentStatus{}).SnapshotHandle, "")
	if handle == "" {
		return Snapshot{}, fmt.Errorf("VolumeSnapshotContent %s has no snapshot handle yet", content)
	}
	return Snapshot{Handle: handle, Driver: c.Spec.Driver}, nil
}

// Token requests a token of the ServiceAccount namespace/name for audience (TokenRequest).
func Token(ctx context.Context, kube kubernetes.Interface, namespace, name, audience string) (string, error) {
	tr, err := kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of ServiceAccount %s/%s for audience %q: %w", namespace, name, audience, err)
	}
	return tr.Status.Token, nil
}
