package snapshotmetadata

import (
	"context"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
)

// authorize authenticates the caller's token for the service's audience with a TokenReview and
// checks with a SubjectAccessReview that the caller may get VolumeSnapshots in namespace.
func (s *Server) authorize(ctx context.Context, token, namespace string) error {
	user, err := s.authenticate(ctx, token)
	if err != nil {
		return err
	}
	extra := make(map[string]authzv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := s.cfg.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{
		Spec: authzv1.SubjectAccessReviewSpec{
			User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
			ResourceAttributes: &authzv1.ResourceAttributes{
				Namespace: namespace, Verb: "get",
				Group: snapshotv1.GroupName, Version: snapshotv1.SchemeGroupVersion.Version, Resource: "volumesnapshots",
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return status.Errorf(codes.Internal, "review the caller's access (SubjectAccessReview): %v", err)
	}
	if !sar.Status.Allowed || sar.Status.Denied {
		klog.FromContext(ctx).V(2).Info("Caller may not get VolumeSnapshots", "user", user.Username, "reason", sar.Status.Reason)
		return status.Errorf(codes.PermissionDenied, "%s may not get volumesnapshots.%s in namespace %s: %s",
			user.Username, snapshotv1.GroupName, namespace, sar.Status.Reason)
	}
	return nil
}

// authenticate reviews token for the service's audience.
func (s *Server) authenticate(ctx context.Context, token string) (authnv1.UserInfo, error) {
	audience, err := s.audience(ctx)
	if err != nil {
		return authnv1.UserInfo{}, err
	}
	tr, err := s.cfg.Kube.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return authnv1.UserInfo{}, status.Errorf(codes.Internal, "review the caller's token (TokenReview): %v", err)
	}
	if !tr.Status.Authenticated || !slices.Contains(tr.Status.Audiences, audience) {
		klog.FromContext(ctx).V(2).Info("Token refused", "audience", audience, "error", tr.Status.Error)
		return authnv1.UserInfo{}, status.Errorf(codes.Unauthenticated, "the security token is not valid for audience %q", audience)
	}
	return tr.Status.User, nil
}

// audience is the configured audience, or the one of the SnapshotMetadataService named after
// the driver.
func (s *Server) audience(ctx context.Context) (string, error) {
	if s.cfg.Audience != "" {
		return s.cfg.Audience, nil
	}
	sms, err := s.cfg.Snapshots.CbtV1beta1().SnapshotMetadataServices().Get(ctx, s.cfg.Driver, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", status.Errorf(codes.Internal, "no SnapshotMetadataService %s tells this service's audience", s.cfg.Driver)
	case err != nil:
		return "", status.Errorf(codes.Unavailable, "read SnapshotMetadataService %s: %v", s.cfg.Driver, err)
	case sms.Spec.Audience == "":
		return "", status.Errorf(codes.Internal, "SnapshotMetadataService %s has no audience", s.cfg.Driver)
	}
	return sms.Spec.Audience, nil
}
